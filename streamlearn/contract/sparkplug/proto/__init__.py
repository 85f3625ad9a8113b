"""Sparkplug B's payload, as protoc wrote it from Eclipse Tahu's `sparkplug_b.proto`
(unchanged: its package, names and field numbers). `sparkplug_b_pb2.py` and `.pyi` are
generated, committed, and written again by `bash streamlearn/contract/sparkplug/proto/
generate.sh` (with grpcio-tools installed; nothing else needs it). Its messages live in a
descriptor pool of their own, so that a user's module generated from Tahu's file, of the
same names, can be loaded beside them.
"""
