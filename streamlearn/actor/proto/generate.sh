#!/usr/bin/env bash
# Writes grpc_service_pb2.py, grpc_service_pb2.pyi and grpc_service_pb2_grpc.py from
# grpc_service.proto (committed: grpcio-tools is needed only here, never at run time):
#   .venv/bin/pip install grpcio-tools && bash streamlearn/actor/proto/generate.sh
# The messages go into a descriptor pool of their own, not protobuf's default one, where
# tritonclient.grpc (or any module generated from upstream's file) puts the same
# `inference.*` names: one process may load both.
set -euo pipefail
cd "$(dirname "$0")/../../.."
python="${PYTHON:-.venv/bin/python}"
proto=streamlearn/actor/proto/grpc_service.proto
"$python" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. "$proto"
sed -i 's/_descriptor_pool\.Default()/_descriptor_pool.DescriptorPool()/' "${proto%.proto}_pb2.py"
