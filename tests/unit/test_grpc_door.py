"""The gRPC door's messages (no server): the .proto agrees with upstream's, field by field;
a ModelInferRequest is read as the HTTP door reads the same tensors; a response is what
tritonclient.grpc reads.

The door itself, against a real actor, Redis and Mosquitto and with a client no one here
wrote, is `tests/integration/test_grpc_door.py`.
"""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

import numpy as np
import pytest
from tritonclient.grpc import InferResult, model_config_pb2, service_pb2

from streamlearn.actor import grpc_door, grpc_messages, grpc_stream, oip
from streamlearn.actor.proto import grpc_service_pb2 as pb
from streamlearn.config import ModelConfig
from streamlearn.contract.payloads import PayloadParser
from streamlearn.errors import PayloadError

NAMED = ModelConfig(
    name="m",
    inputs=["t", "ENERGY.Power", "kind"],
    target="failed",
    task="binary",
    categorical={"kind": ["press", "lathe"]},
)
POSITIONAL = ModelConfig(name="p", inputs=3, task="multiclass", classes=4)


def upstream(name: str):  # tritonclient's descriptors: upstream's grpc_service.proto
    for module in (service_pb2, model_config_pb2):
        try:
            return module.DESCRIPTOR.pool.FindMessageTypeByName(f"inference.{name}")
        except KeyError:
            continue
    raise KeyError(name)


def test_every_message_field_and_method_is_upstreams_so_generated_stubs_interoperate():
    ours = pb.DESCRIPTOR
    assert ours.package == "inference"
    todo = list(ours.message_types_by_name.values())
    while todo:
        message = todo.pop()
        theirs = upstream(message.full_name.removeprefix("inference."))
        for field in message.fields:
            match = theirs.fields_by_name[field.name]
            assert (field.number, field.type, field.is_repeated) == (
                match.number,
                match.type,
                match.is_repeated,
            ), field.full_name
            for kind in ("message_type", "enum_type"):
                if getattr(field, kind) is not None:
                    assert getattr(field, kind).full_name == getattr(match, kind).full_name
        todo.extend(m for m in message.nested_types if not m.GetOptions().map_entry)
    theirs = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    service = ours.services_by_name["GRPCInferenceService"]
    assert service.full_name == theirs.full_name == grpc_door.SERVICE
    for method in service.methods:
        match = theirs.methods_by_name[method.name]
        assert method.input_type.full_name == match.input_type.full_name
        assert method.output_type.full_name == match.output_type.full_name
        assert (method.client_streaming, method.server_streaming) == (
            match.client_streaming,
            match.server_streaming,
        ), method.name
    for value in pb.DataType.DESCRIPTOR.values:
        assert model_config_pb2.DataType.Value(value.name) == value.number


def read(cfg: ModelConfig, request: pb.ModelInferRequest) -> oip.Infer:
    doc, tail = grpc_messages.document(request)
    return oip.read_document(cfg, PayloadParser(cfg), doc, tail)


def test_contents_and_raw_contents_are_read_as_the_http_door_reads_the_same_tensors():
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    http = oip.read_infer(
        POSITIONAL,
        PayloadParser(POSITIONAL),
        json.dumps(
            {
                "id": "r",
                "inputs": [
                    {"name": "x", "shape": [2, 3], "datatype": "FP32", "data": x.ravel().tolist()}
                ],
            }
        ).encode(),
        None,
    )
    contents = pb.ModelInferRequest(id="r")
    tensor = contents.inputs.add(name="x", datatype="FP32", shape=[2, 3])
    tensor.contents.fp32_contents.extend(x.ravel().tolist())
    raw = pb.ModelInferRequest(id="r")
    raw.inputs.add(name="x", datatype="FP64", shape=[2, 3])
    raw.raw_input_contents.append(x.astype("<f8").tobytes())
    for request in (contents, raw):
        got = read(POSITIONAL, request)
        np.testing.assert_array_equal(got.x, http.x)
        assert got.id == "r"

    named = pb.ModelInferRequest()
    named.inputs.add(name="t", datatype="FP32", shape=[2, 1]).contents.fp32_contents.extend(
        [20.5, 21]
    )
    named.inputs.add(
        name="ENERGY.Power", datatype="INT64", shape=[2]
    ).contents.int64_contents.extend([3, 4])
    named.inputs.add(name="kind", datatype="BYTES", shape=[2, 1]).contents.bytes_contents.extend(
        [b"lathe", b"press"]
    )
    assert read(NAMED, named).x.tolist() == [[20.5, 3.0, 1.0], [21.0, 4.0, 0.0]]


def test_parameters_are_read_as_the_jsons_and_bad_tensors_named():
    request = pb.ModelInferRequest()
    request.inputs.add(name="x", datatype="FP32", shape=[1, 3]).contents.fp32_contents.extend(
        [1, 2, 3]
    )
    request.parameters["timeout"].int64_param = 250_000
    request.outputs.add(name="y").parameters["classification"].int64_param = 2
    wanted = read(POSITIONAL, request).wanted
    assert (wanted.timeout_s, wanted.classification) == (0.25, 2)

    wide = pb.ModelInferRequest()
    wide.inputs.add(name="x", datatype="FP32", shape=[1, 4]).contents.fp32_contents.extend(
        [1, 2, 3, 4]
    )
    half = pb.ModelInferRequest()
    half.inputs.add(name="x", datatype="FP16", shape=[1, 3]).contents.fp32_contents.extend(
        [1, 2, 3]
    )
    short = pb.ModelInferRequest()
    short.inputs.add(name="x", datatype="FP32", shape=[1, 3])
    short.inputs.add(name="z", datatype="FP32", shape=[1, 3])
    short.raw_input_contents.append(b"\0" * 12)
    cases = [
        (wide, "x: shape must be [rows, 3], got [1, 4]"),
        (half, "FP16 comes in raw_input_contents only"),
        (short, "raw_input_contents: one per input expected, got 1 for 2 inputs"),
    ]
    for request, reason in cases:
        with pytest.raises(PayloadError, match=reason.replace("[", r"\[")):
            read(POSITIONAL, request)


def test_a_response_is_what_tritonclient_grpc_reads():
    y = [[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]]
    reply = {"y": y, "version": 7, "variant": "base"}
    for wanted, name in ((oip.Wanted(binary=True), "y"), (oip.Wanted(True, 2), "y")):
        doc, data = oip.response(POSITIONAL, reply, "r1", wanted)
        wire = grpc_messages.response(doc, data).SerializeToString()
        result = InferResult(service_pb2.ModelInferResponse.FromString(wire))
        got = result.get_response()
        assert (got.model_name, got.model_version, got.id) == ("p", "7", "r1")
        assert got.parameters["variant"].string_param == "base"
        if wanted.classification:
            assert result.as_numpy(name).tolist() == [
                [b"0.400000:3", b"0.300000:2"],
                [b"0.400000:0", b"0.300000:1"],
            ]
        else:
            np.testing.assert_array_equal(result.as_numpy(name), np.float32(y))


class Stream(SimpleNamespace):
    """What `grpc_stream.Stream` uses of grpcio's call and of the door, with no server: the
    messages a client sent, a door that answers each request at once, or not at all."""

    def __init__(self, messages: list[bytes], answers: bool = True) -> None:
        super().__init__(
            incoming=asyncio.Queue(), written=[], ended=None, draining=False, answers=answers
        )
        self.cfg, self.counts = POSITIONAL, {}
        for message in messages:
            self.incoming.put_nowait(message)

    async def read(self):  # the context's: waits as grpcio's does for the next message
        return await self.incoming.get()

    async def write(self, message) -> None:
        self.written.append(message)

    async def abort(self, code, reason) -> None:
        self.ended = (code.name, reason)

    def queue(self, request, call):  # the door's: the reply settled by the serving loop
        replied = asyncio.get_running_loop().create_future()
        if self.answers:
            replied.set_result({"y": [0.5] * 4, "version": 1})
        answering = lambda reply: pb.ModelInferResponse(id=request.id)  # noqa: E731
        return replied, time.monotonic() + 0.05, answering

    def failure(self, exc, name):
        return grpc_messages.failure(exc)

    def counted(self, code) -> None:
        self.counts[code.name] = self.counts.get(code.name, 0) + 1

    def run(self) -> None:
        async def serve() -> None:
            await grpc_stream.Stream(self, self, "10.0.0.1").run()

        asyncio.run(serve())


def infer_message(rid: str) -> bytes:
    return pb.ModelInferRequest(model_name="p", id=rid).SerializeToString()


def test_a_stream_ends_when_idle_and_when_its_actor_stops_each_answer_given(monkeypatch):
    """The bounds of a stream the integration test cannot wait for: one without a message
    for IDLE_S ends UNAVAILABLE, saying so, after answering what it read; a message read
    once the actor stops gets the error as its answer and ends the stream; an answer that
    never comes is DEADLINE_EXCEEDED GRACE_S past its deadline."""
    monkeypatch.setattr(grpc_stream, "IDLE_S", 0.05)
    monkeypatch.setattr(grpc_stream, "GRACE_S", 0.01)
    idle = Stream([infer_message("a"), b"\xff not a message"])
    idle.run()
    answers = {m.infer_response.id: m.error_message for m in idle.written}
    assert answers.keys() == {"a", ""} and answers["a"] == ""  # in the order answered
    assert "could not be decoded" in answers[""]
    assert idle.ended == ("UNAVAILABLE", "no message for 0.05 s: stream ended")
    assert idle.counts == {"OK": 1, "INVALID_ARGUMENT": 1}

    stopping = Stream([infer_message("b")])
    stopping.draining = True
    stopping.run()
    assert stopping.written[0].error_message == "the actor stops: stream ended"
    assert stopping.ended == ("UNAVAILABLE", "the actor stops: stream ended")

    lost = Stream([infer_message("c")], answers=False)
    lost.run()  # its deadline 0.05 s, then GRACE_S for the serving loop's expiry answer
    assert lost.written[0].error_message == "no reply within the request's deadline"
    assert lost.counts == {"DEADLINE_EXCEEDED": 1}
