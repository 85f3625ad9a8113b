"""The actor's gRPC door, driven by a client no one here wrote.

`tritonclient.grpc` (NVIDIA's client for Triton's `inference.GRPCInferenceService`, which
KServe's V2 protocol shares) checks readiness, reads metadata and infers against a real
actor on a real Redis and Mosquitto, one actor for the module: the same inputs get the
same predictions over gRPC, HTTP and MQTT from the same version; the door's bounds and
token answer with the protocol's status codes, and the door keeps serving.
"""

from __future__ import annotations

import contextlib
import queue
import re
import socket
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
import redis as redis_lib
import tritonclient.grpc as triton
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from streamlearn.actor.grpc_door import SERVICE
from streamlearn.actor.proto import grpc_service_pb2 as pb
from streamlearn.actor.proto import grpc_service_pb2_grpc as stubs
from streamlearn.config import Settings, parse_config
from streamlearn.contract.names import Names
from streamlearn.nn import networks
from streamlearn.online import codec, tensors
from streamlearn.stack.embedded import free_port
from streamlearn.store.weights import WeightsStore
from tests.conftest import Client, eventually, launch_role, own_settings, sample, scrape

MODEL = "g"
TOML = """
[models.g]
inputs = 3
task = "binary"
hidden = [8]

[models.g.ingest]
max_payload_bytes = 32768      # the gRPC door's message bound, below the JSON bound

[models.g.actor]
http_port = {http_port}
grpc_port = {grpc_port}
grpc_max_connections = 12
grpc_max_rpcs_per_peer = 4
grpc_message_timeout_ms = 4000
reload_check_ms = 50
"""
TOKEN = "a-token-for-every-door"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@dataclass
class Door:
    grpc: str  # host:port
    http: str
    grpc_port: int
    metrics_port: int
    settings: Settings

    def client(self) -> triton.InferenceServerClient:
        return triton.InferenceServerClient(self.grpc)

    def metrics(self) -> str:
        return scrape(self.metrics_port)


@pytest.fixture(scope="module")
def door(redis_server, mosquitto_server, tmp_path_factory) -> Iterator[Door]:
    """One actor with both doors and a token; versions 1..3 published."""
    settings = own_settings(redis_server, mosquitto_server)
    tmp = tmp_path_factory.mktemp("grpc")
    grpc_port, http_port, metrics_port = free_port(), free_port(), free_port()
    toml = TOML.format(http_port=http_port, grpc_port=grpc_port)
    cfg = parse_config(tomllib.loads(toml)).model(MODEL)
    redis = redis_lib.Redis.from_url(settings.redis)
    store = WeightsStore(redis, Names(MODEL, settings.topic_prefix, settings.key_prefix))
    template = tensors.get_arrays(networks.build_model(cfg))
    for v in (1, 2, 3):
        rng = np.random.default_rng(v)
        arrays = {
            path: a if "standardize" in path or "alpha" in path else rng.normal(0, 0.7, a.shape)
            for path, a in template.items()
        }
        arrays = {path: a.astype(template[path].dtype) for path, a in arrays.items()}
        store.publish(codec.encode(arrays, {"version": str(v)}))
    (tmp / "streamlearn.toml").write_text(toml)
    env = {"STREAMLEARN_HTTP_TOKEN": TOKEN, "STREAMLEARN_METRICS_PORT": str(metrics_port)}
    proc = launch_role(settings, "actor", tmp / "streamlearn.toml", env=env)
    try:
        proc.wait_for(" ready")
        opened = Door(
            f"127.0.0.1:{grpc_port}", f"127.0.0.1:{http_port}", grpc_port, metrics_port, settings
        )
        client = opened.client()
        eventually(lambda: client.is_model_ready(MODEL, "3", headers=AUTH), what="version 3 served")
        client.close()
        yield opened
    finally:
        proc.stop()
        for key in redis.scan_iter(f"{settings.key_prefix}:*"):
            redis.delete(key)
        redis.close()


def infer(client: triton.InferenceServerClient, x: np.ndarray, **kw) -> triton.InferResult:
    tensor = triton.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)  # raw_input_contents, as tritonclient.grpc sends it
    return client.infer(MODEL, [tensor], headers=AUTH, **kw)


def test_a_prediction_is_the_http_doors_and_mqtts_for_the_same_version_and_input(door):
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    client = door.client()
    mqtt = Client(door.settings, MODEL)
    http = triton_http.InferenceServerClient(door.http)
    try:
        for version in ("", "2"):  # the served one (3), and one a request names
            asked = {"x": x.tolist(), **({"version": int(version)} if version else {})}
            want = mqtt.request(asked)
            result = infer(client, x, model_version=version, request_id="r1")
            response = result.get_response()
            assert (response.model_name, response.model_version) == (MODEL, str(want["version"]))
            assert response.id == "r1"
            y = result.as_numpy("y")
            assert y.shape == (5, 1) and y.dtype == np.float32
            np.testing.assert_allclose(y[:, 0], want["y"], rtol=0, atol=1e-6)
            tensor = triton_http.InferInput("x", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            over_http = http.infer(
                MODEL,
                [tensor],
                model_version=version,
                headers={"Authorization": AUTH["authorization"]},
            )
            np.testing.assert_allclose(over_http.as_numpy("y"), y, rtol=0, atol=1e-6)
    finally:
        client.close()
        mqtt.close()
        http.close()


def test_contents_as_generated_stubs_send_them_answer_as_raw_contents_do(door):
    """`contents.fp32_contents`, as stubs generated from the protocol's .proto may send it,
    through the generated Python stub; and the metadata and readiness methods."""
    x = np.random.default_rng(1).normal(size=(2, 3)).astype(np.float32)
    channel = grpc.insecure_channel(door.grpc)
    stub = stubs.GRPCInferenceServiceStub(channel)
    metadata = tuple(AUTH.items())
    try:
        request = pb.ModelInferRequest(model_name=MODEL, id="c")
        request.inputs.add(name="x", datatype="FP32", shape=[2, 3]).contents.fp32_contents.extend(
            x.ravel().tolist()
        )
        response = stub.ModelInfer(request, metadata=metadata, timeout=10)
        assert response.outputs[0].name == "y" and list(response.outputs[0].shape) == [2, 1]
        assert response.parameters["variant"].string_param == "base"
        got = np.frombuffer(response.raw_output_contents[0], "<f4")
        client = door.client()
        np.testing.assert_array_equal(got, infer(client, x).as_numpy("y")[:, 0])

        assert client.is_server_live() and client.is_server_ready()  # the probes: no token
        meta = client.get_model_metadata(MODEL, headers=AUTH, as_json=True)
        assert meta["versions"] == ["1", "2", "3"] and meta["platform"] == "keras"
        assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "3"]}]
        config = client.get_model_config(MODEL, headers=AUTH, as_json=True)["config"]
        assert config["max_batch_size"] == 1024  # actor.max_request_rows
        assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": ["3"]}]
        server = client.get_server_metadata(headers=AUTH)
        assert server.name == "streamlearn"
        assert not client.is_model_ready(MODEL, "9", headers=AUTH)  # not kept
        client.close()
    finally:
        channel.close()


def refused(call, *args, **kw) -> tuple[str, str]:
    """The status code's name and the message of a call that must fail."""
    with pytest.raises(InferenceServerException) as error:
        call(*args, **kw)
    return error.value.status().removeprefix("StatusCode."), error.value.message()


def test_refusals_are_the_protocols_status_codes_and_the_door_keeps_serving(door):
    client = door.client()
    x = np.ones((1, 3), np.float32)
    try:
        wide = np.ones((2, 4), np.float32)
        code, reason = refused(infer, client, wide)
        assert code == "INVALID_ARGUMENT" and "x: shape must be [rows, 3], got [2, 4]" in reason
        big = np.ones((4000, 3), np.float32)  # 48 kB: past the 32 kB a request holds here
        assert refused(infer, client, big)[0] == "RESOURCE_EXHAUSTED"
        tensor = triton.InferInput("x", [1, 3], "FP32")
        tensor.set_data_from_numpy(x)
        code, reason = refused(client.infer, "nope", [tensor], headers=AUTH)
        assert (code, reason) == ("NOT_FOUND", "unknown model 'nope'; this actor serves 'g'")
        for headers in (None, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}):
            code, reason = refused(client.infer, MODEL, [tensor], headers=headers)
            assert code == "UNAUTHENTICATED" and "bearer token is required" in reason
            assert refused(client.get_model_metadata, MODEL, headers=headers)[0] == code
        code, reason = refused(infer, client, x, model_version="-1")
        assert code == "INVALID_ARGUMENT" and "version" in reason
        assert infer(client, x).as_numpy("y").shape == (1, 1)  # and then served
    finally:
        client.close()


def test_stalled_messages_end_in_time_and_hold_no_more_than_their_addresss_share(door):
    """Calls whose message does not come hold one address's share (4 here) until
    grpc_message_timeout_ms (4 s here) ends them: the address's next call is refused
    unread, and each stalled one ends DEADLINE_EXCEEDED. The calls in progress are a gauge."""
    release = threading.Event()

    def nothing() -> Iterator[bytes]:  # sends no message, and keeps the stream open
        release.wait(10)
        yield from ()

    own = [("grpc.use_local_subchannel_pool", 1)]  # a connection each
    channels = [grpc.insecure_channel(door.grpc, options=own) for _ in range(5)]
    metadata = tuple(AUTH.items())
    request = pb.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="x", datatype="FP32", shape=[1, 3]).contents.fp32_contents.extend(
        [1, 2, 3]
    )
    try:
        for channel in channels:
            grpc.channel_ready_future(channel).result(timeout=10)
        eventually(lambda: calls(door) == 0, timeout_s=10, what="no call in progress")
        stalled = [
            channel.stream_unary(f"/{SERVICE}/ModelInfer").future(
                nothing(), metadata=metadata, timeout=10
            )
            for channel in channels[:4]
        ]
        # the four arrived (a probe call before then would take a place a stalled one needs)
        eventually(lambda: calls(door) == 4, timeout_s=10, what="the four calls in progress")
        fifth = stubs.GRPCInferenceServiceStub(channels[4])
        with pytest.raises(grpc.RpcError) as refused_share:
            fifth.ModelInfer(request, metadata=metadata, timeout=10)
        reason = f"{refused_share.value.code().name}: {refused_share.value.details()}"
        assert reason == "UNAVAILABLE: too many calls from one address (grpc_max_rpcs_per_peer=4)"
        for call in stalled:
            ended = call.exception(timeout=10)
            assert ended.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "grpc_message_timeout_ms=4000" in ended.details()
        fifth.ModelInfer(request, metadata=metadata, timeout=10)  # and then served
        eventually(lambda: calls(door) == 0, timeout_s=10, what="the calls' places given back")
    finally:
        release.set()
        for channel in channels:
            channel.close()


def calls(door: Door) -> float | None:
    """The actor's gauge of gRPC calls in progress, as scraped."""
    return sample(door.metrics(), "streamlearn_actor_grpc_calls")


def test_connections_past_the_cap_are_closed_as_they_are_accepted(door):
    """grpcio's cap counts every connection (12 here), with the token or not: one more is
    closed at once, and closing some lets a client in again."""
    held: list[socket.socket] = []
    try:
        closed = None
        for _ in range(16):
            sock = socket.create_connection(("127.0.0.1", door.grpc_port), timeout=2)
            held.append(sock)
            try:
                first = sock.recv(64)  # the server's HTTP/2 SETTINGS, or the end
            except TimeoutError:
                first = b"held"
            except ConnectionResetError:
                first = b""
            if not first:
                closed = len(held)
                break
        assert closed is not None and closed <= 13, "a connection past the cap was accepted"
    finally:
        for sock in held:
            sock.close()
    client = door.client()
    assert eventually(lambda: live(client), what="a connection accepted again")
    client.close()


def live(client: triton.InferenceServerClient) -> bool:
    """Whether the door answers: a connection refused while grpcio still counts the ones
    just closed is a "not yet", as it is for a client retrying."""
    try:
        return client.is_server_live()
    except InferenceServerException:
        return False


def test_every_answer_is_counted_by_code_in_the_actors_metrics(door):
    client = door.client()
    refused(client.get_model_metadata, MODEL)
    refused(infer, client, np.ones((1, 4), np.float32))
    infer(client, np.ones((1, 3), np.float32))
    client.close()

    def counted() -> bool:
        codes = re.findall(
            r'streamlearn_actor_grpc_responses_total\{.*code="(\w+)".*\} ([\d.]+)', door.metrics()
        )
        seen = {code for code, n in codes if float(n) >= 1}
        return {"OK", "UNAUTHENTICATED", "INVALID_ARGUMENT"} <= seen

    eventually(counted, timeout_s=10, what="every answer's code counted")


def test_a_stream_answers_each_request_as_modelinfer_does_and_a_bad_one_in_band(door):
    """tritonclient's streaming API (`start_stream`, `async_stream_infer`; perf_analyzer's
    `--streaming`): on one call, each request gets ModelInfer's answer, by its id; one of
    the wrong width gets its error as the stream's message and the stream goes on; a stream
    without the token ends UNAUTHENTICATED, unread."""
    rows = np.random.default_rng(2).normal(size=(24, 3)).astype(np.float32)
    client = door.client()
    answers: queue.Queue[tuple[triton.InferResult | None, Exception | None]] = queue.Queue()
    try:
        want = infer(client, rows).as_numpy("y")[:, 0]  # one request: the same version's
        client.start_stream(lambda result, error: answers.put((result, error)), headers=AUTH)
        for i, row in enumerate(rows):
            x = row[None, :] if i != 12 else np.ones((1, 4), np.float32)  # 12: too wide
            tensor = triton.InferInput("x", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            client.async_stream_infer(MODEL, [tensor], request_id=f"r{i}")
        got, errors = {}, []
        for _ in range(len(rows)):
            result, error = answers.get(timeout=10)
            if error is not None:
                errors.append(str(error))
                continue
            response = result.get_response()
            assert response.model_version == "3"
            got[response.id] = result.as_numpy("y")[0, 0]
        assert len(errors) == 1 and "x: shape must be [rows, 3], got [1, 4]" in errors[0]
        assert sorted(got) == sorted(f"r{i}" for i in range(len(rows)) if i != 12)
        for rid, y in got.items():
            assert abs(y - want[int(rid[1:])]) <= 1e-6
        client.stop_stream()

        client.start_stream(lambda result, error: answers.put((result, error)))  # no token
        tensor = triton.InferInput("x", [1, 3], "FP32")
        tensor.set_data_from_numpy(rows[:1])
        with contextlib.suppress(InferenceServerException):  # when refused before it is sent
            client.async_stream_infer(MODEL, [tensor], request_id="anonymous")
        result, error = answers.get(timeout=10)  # the refusal: to the callback either way
        assert result is None and "bearer token is required" in str(error)
    finally:
        client.stop_stream()
        client.close()
