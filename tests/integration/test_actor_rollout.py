"""A rollout loses nothing: an actor stopped (SIGTERM) under load over MQTT, HTTP and gRPC
goes unready, leaves new requests to the other actor and answers every one it took.

Two numpy actors serve one model. MQTT requests go to the shared subscription at a steady
rate; HTTP and gRPC requests go through `Service`, which, as a Kubernetes Service does,
sends to an actor while its `/readyz` says ready and retries what a client may retry
elsewhere.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

from streamlearn.contract.names import Names
from streamlearn.stack.embedded import free_port
from tests.conftest import RoleProcess, eventually, launch_role
from tests.load import RequestLoad

MODEL = "ro"
TOML = """
[models.ro]
inputs = 2
task = "regression"
hidden = [4]

[models.ro.actor]
runtime = "numpy"
http_port = {port}
grpc_port = {grpc}
"""
BODY = json.dumps({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]})
INFER = f"/v2/models/{MODEL}/infer"


class Service:
    """Requests from threads, each at `rate` a second (four over HTTP, one over gRPC),
    to the first actor whose `/readyz` answered 200 at the last probe (every 20 ms, as a
    kubelet's probe and the endpoints controller would, only sooner). A refused connection
    or a 503 that closes its connection (HTTP), UNAVAILABLE (gRPC: a call refused unread)
    is retried on the other actor; anything else but a prediction is a failure."""

    def __init__(self, doors: list[int], grpcs: list[int], probes: list[int]) -> None:
        self.doors, self.grpcs, self.probes, self.rate = doors, grpcs, probes, 40.0
        self.ready = [True] * len(doors)
        self.unready_answers = [0] * len(doors)  # 503s of /readyz: up, and saying not ready
        self.answered = [0] * len(doors)
        self.answered_at: list[list[float]] = [[] for _ in doors]
        self.retried = 0
        self.closed = 0  # answers with `Connection: close`
        self.by_grpc = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._probe)]
        for grpc in (False, False, False, False, True):  # 160 HTTP and 40 gRPC requests a second
            self._threads.append(threading.Thread(target=self._send, args=(grpc,)))
        for t in self._threads:
            t.start()

    def _probe(self) -> None:
        while not self._stop.wait(0.02):
            for i, port in enumerate(self.probes):
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                    conn.request("GET", "/readyz")
                    status = conn.getresponse().status
                    conn.close()
                except OSError:
                    status = 0  # refused: gone
                self.unready_answers[i] += status == 503
                self.ready[i] = status == 200

    def _send(self, grpc: bool = False) -> None:
        if grpc:
            conns: list = [triton.InferenceServerClient(f"127.0.0.1:{p}") for p in self.grpcs]
        else:
            conns = [
                http.client.HTTPConnection("127.0.0.1", port, timeout=10) for port in self.doors
            ]
        start, n = time.monotonic(), 0
        while not self._stop.wait(max(0.0, start + n / self.rate - time.monotonic())):
            n += 1
            first = next((i for i, ready in enumerate(self.ready) if ready), len(conns) - 1)
            for i in (first, *(j for j in range(len(conns)) if j != first)):
                outcome = self._call(conns[i], i) if grpc else self._infer(conns[i], i)
                if outcome != "retry":
                    break
                with self._lock:
                    self.retried += 1
            else:
                self._failed("every actor refused")
        for conn in conns:
            conn.close()

    def _infer(self, conn: http.client.HTTPConnection, i: int) -> str:
        try:
            conn.request("POST", INFER, BODY, {"Content-Type": "application/json"})
            response = conn.getresponse()
            body = response.read()
        except ConnectionRefusedError:
            conn.close()
            return "retry"
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            self._failed(f"door {i}: {type(exc).__name__}: {exc}")
            return "failed"
        closing = response.getheader("Connection", "").lower() == "close"
        if response.status == 503 and closing:
            return "retry"
        if response.status != 200 or "outputs" not in json.loads(body):
            self._failed(f"door {i}: {response.status} {body[:200]!r}")
            return "failed"
        with self._lock:
            self.answered[i] += 1
            self.answered_at[i].append(time.monotonic())
            self.closed += closing
        return "ok"

    def _call(self, client: triton.InferenceServerClient, i: int) -> str:
        tensor = triton.InferInput("x", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.array([[1, 2]], np.float32))
        try:
            client.infer(MODEL, [tensor], client_timeout=10).as_numpy("y")
        except InferenceServerException as exc:
            if exc.status() == "StatusCode.UNAVAILABLE":
                return "retry"
            self._failed(f"gRPC {i}: {exc.status()} {exc.message()}")
            return "failed"
        with self._lock:
            self.answered[i] += 1
            self.answered_at[i].append(time.monotonic())
            self.by_grpc += 1
        return "ok"

    def _failed(self, why: str) -> None:
        with self._lock:
            self.failures.append(why)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)


def test_an_actor_stopped_under_load_loses_and_fails_no_request(settings, tmp_path: Path):
    names = Names(MODEL, settings.topic_prefix, settings.key_prefix)
    doors, grpcs = [free_port(), free_port()], [free_port(), free_port()]
    probes = [free_port(), free_port()]
    actors: list[RoleProcess] = []
    for i, (door, grpc, probe) in enumerate(zip(doors, grpcs, probes, strict=True)):
        config = tmp_path / f"actor{i}.toml"  # both started, then waited for
        config.write_text(TOML.format(port=door, grpc=grpc))
        env = {"STREAMLEARN_METRICS_PORT": str(probe)}
        actors.append(launch_role(settings, "actor", config, instance=str(i), env=env))
    load: RequestLoad | None = None
    service: Service | None = None
    try:
        for actor in actors:
            actor.wait_for(" ready")
        load = RequestLoad(settings, names, rate=200, x=[1, 2])
        service = Service(doors, grpcs, probes)
        eventually(
            lambda: len(load.replies) >= 100 and service.answered[0] >= 40,
            20,
            "MQTT answered, and the doors by the first actor",
        )
        stopping = len(load.sent_at)
        signalled = time.monotonic()
        actors[0].proc.terminate()  # SIGTERM, as the kubelet sends it after the preStop hook
        assert actors[0].proc.wait(20) == 0
        stopped = time.monotonic()
        after, answered = len(load.sent_at), service.answered[1]
        eventually(
            lambda: (
                all(i in load.replies for i in range(after, after + 100))
                and service.answered[1] >= answered + 40
            ),
            20,
            "the other actor answering alone, over MQTT and the doors",
        )
    finally:
        if service is not None:
            service.stop()
        if load is not None:
            load.stop()
        for actor in actors:
            actor.stop()

    drained = [line for line in actors[0].lines if "requests taken before unsubscribing" in line]
    late = sum(t > signalled for t in service.answered_at[0])
    print(
        f"\nMQTT: {len(load.sent_at)} requests, {stopping} before the SIGTERM; HTTP and gRPC: "
        f"{sum(service.answered)} answered ({service.by_grpc} gRPC), {late} by the stopping "
        f"actor after its SIGTERM "
        f"({service.closed} closing their connection), {service.retried} retried on the other; "
        f"stop took {stopped - signalled:.2f} s; {drained}"
    )
    assert load.unanswered() == [], "every MQTT request answered, those the stopping one took too"
    assert all("y" in reply for reply in load.replies.values()), "none with an error"
    assert service.failures == [], "no HTTP request or gRPC call failed"
    assert service.unready_answers[0] > 0, "/readyz said not ready while the actor drained"
    assert drained, "the stopping actor drained its inbox"
