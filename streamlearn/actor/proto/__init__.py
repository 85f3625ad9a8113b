"""The Open Inference Protocol's gRPC service, as protoc wrote it for the gRPC door.

`grpc_service.proto` is upstream's (Triton's `grpc_service.proto`, KServe V2) in part, with
its package, names and field numbers; `grpc_service_pb2.py`, `.pyi` and
`grpc_service_pb2_grpc.py` are generated from it, committed, and written again by
`bash streamlearn/actor/proto/generate.sh` (with grpcio-tools installed; nothing else
needs it). Its messages live in a descriptor pool of their own, so that tritonclient's,
of the same names, can be loaded beside them.
"""
