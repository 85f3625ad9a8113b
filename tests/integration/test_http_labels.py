"""Labels over HTTP (issue 65): a one-row HTTP request with an `id` keeps its prediction in
its caller's namespace (its bearer token's, else its address's), and the door's labels
route joins its label exactly once, through ingest's append and join. Real Redis and
Mosquitto; two real actors (one door with a token, one without) and an ingest, started once
for the module, serving a built-in model's initial state (no learner: the served score and
the stream are what a learner would read)."""

from __future__ import annotations

import http.client
import json
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis as redis_lib

from streamlearn.config import Settings, parse_config
from streamlearn.contract.names import Names, owned
from streamlearn.stack import embedded
from streamlearn.stack.embedded import free_port
from streamlearn.store.entries import unpack
from streamlearn.store.pending import PendingStore
from tests.conftest import Client, eventually, launch_role, own_settings, plain_paho, sample

MODEL = "hl"
TOKEN = "labels-over-http-token"
LIMIT = 4096  # ingest.max_payload_bytes: a labels body's bound
TOML = """
[models.hl]
inputs = 2
task = "regression"
architecture = "linear"

[models.hl.ingest]
max_payload_bytes = 4096

[models.hl.actor]
http_port = {port}
"""


@dataclass
class Doors:
    settings: Settings
    names: Names
    redis: redis_lib.Redis
    token_port: int  # the door that asks for TOKEN
    open_port: int  # the door without a token: a caller is its address
    metrics: str  # the token door's actor's /metrics

    def post(
        self, path: str, body: dict | bytes, *, token: bool = True, source: str = "127.0.0.1"
    ) -> tuple[int, dict]:
        """POST to the token door (`token`) or, without, the open one, from `source`."""
        port = self.token_port if token else self.open_port
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {TOKEN}"
        try:
            conn.request("POST", path, data, headers)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def infer(self, rid: str, rows: list[list[float]], token: bool = True) -> dict:
        tensor = {"name": "x", "shape": [len(rows), 2], "datatype": "FP32", "data": rows}
        body = {"id": rid, "inputs": [tensor]}
        code, doc = self.post(f"/v2/models/{MODEL}/infer", body, token=token)
        assert code == 200, doc
        return doc

    def label(self, labels: list[dict], token: bool = True, source: str = "127.0.0.1") -> list:
        body = {"labels": labels}
        code, doc = self.post(f"/v2/models/{MODEL}/labels", body, token=token, source=source)
        assert code == 200, doc
        return doc["results"]

    def metric(self, name: str) -> float:
        text = urllib.request.urlopen(self.metrics, timeout=10).read().decode()
        found = sample(text, f"streamlearn_actor_{name}")
        assert found is not None, f"{name} not in the actor's metrics"
        return found

    def learned(self) -> dict[float, list[float]]:
        """The stream's samples, what a learner learns: first input -> its targets."""
        got: dict[float, list[float]] = {}
        for _, fields in self.redis.xrange(self.names.samples_key):
            samples = unpack(fields, (2,))
            for x, y in zip(samples.x[:, 0].tolist(), samples.y.tolist(), strict=True):
                got.setdefault(x, []).append(y)
        return got

    def served(self) -> dict:
        cfg = parse_config(tomllib.loads(TOML.format(port=0))).model(MODEL)
        score = PendingStore(self.redis, self.names, cfg.labels).served("mae")
        return score or {"labels": 0, "unknown": 0}


@pytest.fixture(scope="module")
def doors(
    redis_server: embedded.ServerProcess,
    mosquitto_server: embedded.ServerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Doors]:
    settings = own_settings(redis_server, mosquitto_server)
    names = Names(MODEL, settings.topic_prefix, settings.key_prefix)
    redis = redis_lib.Redis.from_url(settings.redis)
    token_port, open_port, metrics_port = free_port(), free_port(), free_port()
    where = tmp_path_factory.mktemp("http-labels")
    configs = []
    for port in (token_port, open_port):
        configs.append(where / f"door-{port}.toml")
        configs[-1].write_text(TOML.format(port=port))
    token_env = {"STREAMLEARN_HTTP_TOKEN": TOKEN, "STREAMLEARN_METRICS_PORT": str(metrics_port)}
    roles = [
        launch_role(settings, "actor", configs[0], instance="0", env=token_env),
        launch_role(settings, "actor", configs[1], instance="1"),
        launch_role(settings, "ingest", configs[0]),
    ]
    try:
        for role in roles:
            role.wait_for(" ready")
        yield Doors(
            settings,
            names,
            redis,
            token_port,
            open_port,
            f"http://127.0.0.1:{metrics_port}/metrics",
        )
    finally:
        for role in roles:
            role.stop()
        for key in redis.scan_iter(f"{settings.key_prefix}:*"):
            redis.delete(key)
        redis.close()


def test_an_http_prediction_with_an_id_joins_its_label_once(doors):
    before = doors.served()
    doors.infer("m1", [[1.5, 0.0]])
    assert doors.label([{"id": "m1", "y": 2.5}]) == ["joined"]  # answered once it is stored
    assert doors.learned()[1.5] == [2.5]
    assert doors.label([{"id": "m1", "y": 2.5}, {"id": "m1", "y": 9}]) == [
        "duplicate",
        "duplicate",
    ]
    doors.infer("m2", [[1.6, 0.0], [1.7, 0.0]])  # two rows: one id names no one prediction
    code, doc = doors.post(f"/v2/models/{MODEL}/labels", {"id": "m2", "y": 1})  # MQTT's form
    assert code == 200 and doc["results"] == ["unknown_id"], doc
    assert {k: doc[k] for k in ("joined", "duplicate", "unknown_id")} == {
        "joined": 0,
        "duplicate": 0,
        "unknown_id": 1,
    }
    assert doors.learned()[1.5] == [2.5], "learned once"
    assert 1.6 not in doors.learned() and 1.7 not in doors.learned()
    after = doors.served()  # the served score a learner's status shows
    assert (after["labels"] - before["labels"], after["unknown"] - before["unknown"]) == (1, 1)
    joined = lambda: doors.metric("http_labels_joined_total") == 1  # noqa: E731
    eventually(joined, 10, "the actor's metrics")
    assert doors.metric("http_labels_duplicate_total") == 2
    assert doors.metric("http_labels_unknown_total") == 1


def test_an_id_is_its_askers_alone_on_either_door(doors):
    """The id "42" asked five times, by the token's callers, by two addresses of the open
    door, by MQTT client alice and on bare `predict`: each label joins only its own asker's
    prediction, and no other namespace's label takes one."""
    settings, names = doors.settings, doors.names
    doors.infer("42", [[1.0, 0.0]])  # the token's
    doors.infer("42", [[2.0, 0.0]], token=False)  # 127.0.0.1's, on the open door
    alice = Client(settings, MODEL, "alice")
    raw = plain_paho(settings)

    def send(leaf: str, doc: dict) -> None:
        raw.publish(names.topic(leaf), json.dumps(doc), qos=1).wait_for_publish(10)

    try:
        assert "error" not in alice.request({"x": [3.0, 0.0], "id": "42"})
        send("predict", {"x": [4.0, 0.0], "id": "42"})  # bare predict: no reply read
        bare = names.pending_key(owned(None, "42"))
        eventually(lambda: doors.redis.exists(bare), 10, "bare predict's prediction kept")
        # Others' labels first: none joins what it did not ask for.
        assert doors.label([{"id": "42", "y": -1}], token=False, source="127.0.0.2") == [
            "unknown_id"
        ]
        assert doors.label([{"id": "a-only", "y": -2}]) == ["unknown_id"]
        send("labels/mallory", {"id": "42", "y": -3})
        assert "error" not in alice.request({"x": [5.0, 0.0], "id": "a-only"})
        # Each asker's own label joins its own prediction.
        assert doors.label([{"id": "42", "y": 10}]) == ["joined"]
        assert doors.label([{"id": "42", "y": 20}], token=False) == ["joined"]
        send("labels/alice", {"labels": [{"id": "42", "y": 30}, {"id": "a-only", "y": 50}]})
        send("labels", {"id": "42", "y": 40})
        both = lambda: {3.0, 4.0, 5.0} <= set(doors.learned())  # noqa: E731
        eventually(both, 30, "the MQTT labels joined")
        letters = lambda: doors.redis.xlen(names.deadletter_key) == 1  # noqa: E731
        eventually(letters, 30, "mallory's dead letter")
    finally:
        raw.disconnect()
        alice.close()
    got = doors.learned()
    assert {x: got.get(x) for x in (1.0, 2.0, 3.0, 4.0, 5.0)} == {
        1.0: [10.0],
        2.0: [20.0],
        3.0: [30.0],
        4.0: [40.0],
        5.0: [50.0],
    }
    assert not {-1.0, -2.0, -3.0} & {y for ys in got.values() for y in ys}
    letter = doors.redis.xrange(names.deadletter_key)[0][1]
    assert letter[b"kind"] == b"unknown_id" and b"mallory" in letter[b"reason"]


def test_the_labels_route_asks_for_the_token_and_bounds_its_body(doors):
    path = f"/v2/models/{MODEL}/labels"
    code, doc = doors.post(path, {"id": "m1", "y": 1}, token=False, source="127.0.0.3")
    assert code == 200 and doc["results"] == ["unknown_id"], "the open door needs none"
    conn = http.client.HTTPConnection("127.0.0.1", doors.token_port, timeout=30)
    try:
        conn.request("POST", path, b'{"id": "m1", "y": 1}')  # no Authorization
        response = conn.getresponse()
        assert response.status == 401 and response.getheader("WWW-Authenticate") == "Bearer"
        response.read()
    finally:
        conn.close()
    items = [{"id": f"big-{i:04d}", "y": 1} for i in range(200)]  # over LIMIT bytes
    code, doc = doors.post(path, {"labels": items})
    assert code == 413 and "refused unread" in doc["error"], doc
    code, doc = doors.post(path, {"labels": [{"id": "m9", "y": 1}, {"y": 2}]})
    assert code == 400 and "no label joined" in doc["error"], doc
    code, doc = doors.post(path, b"{not json")
    assert code == 400, doc
    code, doc = doors.post("/v2/models/other/labels", {"id": "m1", "y": 1})
    assert code == 404, doc
