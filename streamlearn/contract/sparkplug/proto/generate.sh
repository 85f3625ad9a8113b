#!/usr/bin/env bash
# Writes sparkplug_b_pb2.py and sparkplug_b_pb2.pyi from sparkplug_b.proto, Eclipse Tahu's
# (eclipse-tahu/tahu, sparkplug_b/sparkplug_b.proto, unchanged: its package, names and field
# numbers). Committed: grpcio-tools is needed only here, never at run time:
#   .venv/bin/pip install grpcio-tools && bash streamlearn/contract/sparkplug/proto/generate.sh
# The messages go into a descriptor pool of their own, not protobuf's default one, where a
# user's own module generated from Tahu's file would put the same `org.eclipse.tahu.*` names.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
python="${PYTHON:-.venv/bin/python}"
proto=streamlearn/contract/sparkplug/proto/sparkplug_b.proto
"$python" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. "$proto"
out="${proto%.proto}_pb2"
sed -i 's/_descriptor_pool\.Default()/_descriptor_pool.DescriptorPool()/' "$out.py"
# protoc's form, not ours: lint skips it (its descriptor is one long line), format is ruff's
sed -i '1i # ruff: noqa' "$out.py" "$out.pyi"
"${RUFF:-.venv/bin/ruff}" format -q "$out.py" "$out.pyi"
