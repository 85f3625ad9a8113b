"""The gRPC door's messages as the Open Inference Protocol's documents (`oip`), both ways.

A ModelInferRequest becomes the JSON's document and the binary tensors after it, so that
`oip.read_document` reads it with the HTTP door's checks and messages; `oip`'s response,
metadata and configuration documents become their messages. The messages are
`streamlearn.actor.proto`'s (upstream's names and field numbers). And grpcio's name of a
call's peer as the address the doors' shares are counted by (`address`); a call's error
status (`Refused`, the HTTP door's statuses as codes) and what a method needs of its call.
"""

from __future__ import annotations

import functools
import ipaddress
import urllib.parse
from typing import Any, NamedTuple

import grpc
import redis
from google.protobuf.message import DecodeError, Message

from streamlearn.actor.proto import grpc_service_pb2 as pb
from streamlearn.actor.tensors import NUMERIC
from streamlearn.errors import PayloadError

Code = grpc.StatusCode
# The HTTP door's statuses as gRPC codes.
CODES = {
    400: Code.INVALID_ARGUMENT,
    401: Code.UNAUTHENTICATED,
    404: Code.NOT_FOUND,
    408: Code.DEADLINE_EXCEEDED,
    413: Code.RESOURCE_EXHAUSTED,
    500: Code.INTERNAL,
    503: Code.UNAVAILABLE,
    504: Code.DEADLINE_EXCEEDED,
}
SHED = "the actor's queue is full: request shed, retry later"
GRACE_S = 1.0  # the serving loop answers expiry itself: this long past a deadline, none comes


class Refused(Exception):
    """A call's error status: its code and the HTTP door's message for it."""

    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


class Call(NamedTuple):
    """What a method needs of its call besides the message."""

    context: Any  # grpc.aio.ServicerContext
    peer: str  # its IP address
    arrived: float  # time.monotonic() when the call (or the stream's message) began
    size: int  # the message's bytes


def parse(kind: type[Message], raw: bytes) -> Any:
    """A message of `kind` from its bytes; `PayloadError` when they are not one."""
    try:
        return kind.FromString(raw)
    except DecodeError as exc:
        raise PayloadError(f"the message could not be decoded: {exc}") from None


def failure(exc: Exception) -> tuple[grpc.StatusCode, str] | None:
    """The status an expected error answers with: a refusal, a message that does not read
    (or names a version or label that is not), Redis unreachable; None for another (a bug:
    the door answers INTERNAL and logs it)."""
    if isinstance(exc, Refused):
        return exc.code, exc.reason
    if isinstance(exc, PayloadError):
        code = Code.RESOURCE_EXHAUSTED if exc.kind == "too_large" else Code.INVALID_ARGUMENT
        return code, str(exc)
    if isinstance(exc, redis.RedisError):  # the versions kept, asked of Redis
        return Code.UNAVAILABLE, f"Redis unreachable: {exc}"
    return None


# Where a tensor's `contents` hold each datatype (FP16 comes only as raw bytes).
CONTENTS = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def document(request: Any) -> tuple[dict[str, Any], bytes]:
    """A ModelInferRequest as the protocol's JSON document and the binary tensors after it
    (`oip.read_document`): `raw_input_contents` as binary tensors, one per input, or
    each input's `contents` of its datatype as its `data`."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise PayloadError(
            f"raw_input_contents: one per input expected, got {len(raw)} for "
            f"{len(request.inputs)} inputs"
        )
    inputs: list[dict[str, Any]] = []
    for i, tensor in enumerate(request.inputs):
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        if raw:
            entry["parameters"] = {"binary_data_size": len(raw[i])}
        else:
            entry["data"] = _contents(i, tensor)
        inputs.append(entry)
    doc: dict[str, Any] = {"inputs": inputs, "parameters": _parameters(request.parameters)}
    if request.id:
        doc["id"] = request.id
    if request.outputs:
        doc["outputs"] = [
            {"name": o.name, "parameters": _parameters(o.parameters)} for o in request.outputs
        ]
    return doc, b"".join(raw)


def response(doc: dict[str, Any], data: bytes) -> Message:
    """The ModelInferResponse of `oip.response`'s document, its output's data (binary, as
    a binary tensor's: little-endian, BYTES length-prefixed) in `raw_output_contents`."""
    message = pb.ModelInferResponse(
        model_name=doc["model_name"], model_version=doc["model_version"], id=doc.get("id", "")
    )
    variant = doc["parameters"].get("variant")
    if variant is not None:
        message.parameters["variant"].string_param = str(variant)
    for out in doc["outputs"]:
        message.outputs.add(name=out["name"], datatype=out["datatype"], shape=out["shape"])
    message.raw_output_contents.append(data)
    return message


def metadata(meta: dict[str, Any]) -> Message:
    """The ModelMetadataResponse of `oip.model_metadata`'s document."""
    tensor = pb.ModelMetadataResponse.TensorMetadata
    return pb.ModelMetadataResponse(
        name=meta["name"],
        versions=meta["versions"],
        platform=meta["platform"],
        inputs=[tensor(**t) for t in meta["inputs"]],
        outputs=[tensor(**t) for t in meta["outputs"]],
    )


def config(doc: dict[str, Any]) -> Message:
    """The ModelConfigResponse of `oip.model_config`'s document (what the .proto's part of
    Triton's model configuration holds of it)."""

    def tensor(t: dict[str, Any]) -> dict[str, Any]:  # data_type: the enum's value
        return {**t, "data_type": pb.DataType.Value(t["data_type"])}

    return pb.ModelConfigResponse(
        config=pb.ModelConfig(
            name=doc["name"],
            platform=doc["platform"],
            backend=doc["backend"],
            max_batch_size=doc["max_batch_size"],
            input=[pb.ModelInput(**tensor(t)) for t in doc["input"]],
            output=[pb.ModelOutput(**tensor(t)) for t in doc["output"]],
        )
    )


def _contents(i: int, tensor: Any) -> list[Any]:
    field = CONTENTS.get(tensor.datatype)
    if field is None:
        if tensor.datatype in NUMERIC:  # FP16: no contents field holds it
            raise PayloadError(
                f"inputs.{i} ({tensor.name!r}): {tensor.datatype} comes in raw_input_contents only"
            )
        return []  # `read_tensors` names the datatype it does not know
    values = list(getattr(tensor.contents, field))
    if field == "bytes_contents":
        return [v.decode("utf-8", "replace") for v in values]
    return values


def _parameters(params: Any) -> dict[str, Any]:
    """A map of InferParameter as the JSON's `parameters` object."""
    found = {}
    for key, value in params.items():
        which = value.WhichOneof("parameter_choice")
        if which is not None:
            found[key] = getattr(value, which)
    return found


@functools.lru_cache(maxsize=4096)  # a connection's calls name the same peer
def address(peer: str) -> str:
    """The IP address of grpcio's name of a call's peer (an IPv4 one as the HTTP door has
    it, when a dual-stack listener maps it into IPv6).

    >>> address("ipv4:10.0.0.5:50051"), address("ipv6:%5B::1%5D:50051"), address("unix:/s")
    ('10.0.0.5', '::1', 'unix:/s')
    >>> address("ipv6:%5B::ffff:10.0.0.5%5D:50051")
    '10.0.0.5'
    """
    scheme, _, rest = peer.partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return peer
    host = urllib.parse.unquote(rest).rpartition(":")[0].strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    return str(ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else str(ip)
