"""Kept predictions bounded in bytes, request ids bounded alike on both doors: a real actor
(MQTT and HTTP) and ingest on real Redis and Mosquitto, started once for the module.

A 4,300-digit integer id was kept under a 4,300-character key (10.5 KB an entry, a 64 MiB
Redis full after 6,348 requests): it gets an error reply and keeps nothing. Beyond
`labels.max_pending_bytes` the soonest to expire go, counted in the actor's metrics, and a
label for one still kept joins.
"""

from __future__ import annotations

import json
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis as redis_lib

import streamlearn
from streamlearn.config import Settings, parse_config
from streamlearn.contract.names import Names
from streamlearn.nn import networks
from streamlearn.online import codec, tensors
from streamlearn.stack import embedded
from streamlearn.stack.embedded import free_port
from streamlearn.store.pending import PendingStore, entry_bytes
from streamlearn.store.weights import WeightsStore
from tests.conftest import RoleProcess, eventually, launch_role, own_settings, sample

MODEL = "k"
MAX_BYTES = 65_536  # about 200 predictions of this model
TOML = """
[models.k]
inputs = 2
task = "regression"
architecture = "linear"

[models.k.labels]
max_pending_bytes = 65536
sender_share = 1  # one client may take the whole pool: its bound is what is tested here

[models.k.actor]
http_port = {port}
"""
RULE = "id: a string of 1 to 256 characters or an integer within ±(2**53 - 1), got "
HUGE = 10**4299  # 4,300 digits: the longest integer Python's json reads


@dataclass
class Served:
    settings: Settings
    names: Names
    redis: redis_lib.Redis
    client: streamlearn.Client
    http: str  # the door's base URL
    metrics: str  # the actor's /metrics URL

    def ask(self, body: dict) -> dict:
        return self.client.request(MODEL, body, timeout=30)

    def infer(self, body: dict) -> tuple[int, dict]:
        request = urllib.request.Request(
            f"{self.http}/v2/models/{MODEL}/infer", json.dumps(body).encode(), method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def metric(self, name: str) -> float:
        text = urllib.request.urlopen(self.metrics, timeout=10).read().decode()
        found = sample(text, f"streamlearn_actor_{name}")
        assert found is not None, f"{name} not in the actor's metrics"
        return found

    def kept(self) -> list[bytes]:
        return self.redis.zrange(self.names.pending_index_key, 0, -1)


@pytest.fixture(scope="module")
def served(
    redis_server: embedded.ServerProcess,
    mosquitto_server: embedded.ServerProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    """An actor with its HTTP door and metrics, serving version 1, and an ingest."""
    settings = own_settings(redis_server, mosquitto_server)
    names = Names(MODEL, settings.topic_prefix, settings.key_prefix)
    redis = redis_lib.Redis.from_url(settings.redis)
    port, metrics_port = free_port(), free_port()
    toml = TOML.format(port=port)
    cfg = parse_config(tomllib.loads(toml)).model(MODEL)
    WeightsStore(redis, names).publish(codec.encode(tensors.get_arrays(networks.build_model(cfg))))
    config = tmp_path_factory.mktemp("kept") / "streamlearn.toml"
    config.write_text(toml)
    metrics_env = {"STREAMLEARN_METRICS_PORT": str(metrics_port)}
    roles: list[RoleProcess] = [
        launch_role(settings, "actor", config, env=metrics_env),
        launch_role(settings, "ingest", config),
    ]
    client = streamlearn.Client(settings.mqtt, topic_prefix=settings.topic_prefix)
    try:
        for role in roles:
            role.wait_for(" ready")
        yield Served(
            settings,
            names,
            redis,
            client,
            f"http://127.0.0.1:{port}",
            f"http://127.0.0.1:{metrics_port}/metrics",
        )
    finally:
        client.close()
        for role in roles:
            role.stop()
        for key in redis.scan_iter(f"{settings.key_prefix}:*"):
            redis.delete(key)
        redis.close()


def test_an_id_out_of_bounds_gets_an_error_reply_and_keeps_nothing_on_either_door(served):
    before = len(served.kept())
    for rid in (HUGE, -(2**53), "", "r" * 257):
        reply = served.ask({"x": [1.0, 2.0], "id": rid})
        assert reply.get("error", "").startswith(RULE), reply
    tensor = {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}
    for rid in (HUGE, "", "r" * 257):
        code, doc = served.infer({"id": rid, "inputs": [tensor]})
        assert code == 400 and doc["error"].startswith("id: a string of 1 to 256 characters"), doc
    assert "error" not in served.ask({"x": [1.0, 2.0], "id": 2**53 - 1})
    assert served.infer({"id": "r" * 256, "inputs": [tensor]})[0] == 200
    kept = served.kept()  # the replies follow their keeps
    assert len(kept) == before + 2, "only the valid ids were kept, the MQTT one and HTTP's"
    assert max(len(k) for k in kept) < 400


def test_kept_predictions_stay_within_max_pending_bytes_and_evictions_are_counted(served):
    n = 400
    for start in range(0, n, 50):
        futures = [
            served.client.request_async(MODEL, {"x": [0.5, float(i)], "id": f"b-{i:04d}"}, 30)
            for i in range(start, start + 50)
        ]
        assert all("error" not in f.result() for f in futures)
    kept = served.kept()
    assert 100 < len(kept) < n, "the byte bound, not the count, decided how many stay"
    pipe = served.redis.pipeline(transaction=False)
    for key in [served.names.pending_index_key, *kept]:
        pipe.memory_usage(key, samples=0)
    used = sum(pipe.execute())
    assert used <= MAX_BYTES, f"Redis holds {used} bytes of kept predictions"
    cfg = parse_config(tomllib.loads(TOML.format(port=0))).model(MODEL)
    count, counted = PendingStore(served.redis, served.names, cfg.labels).size()
    value = 18 + 4 * (2 + 1)  # the header, 2 inputs and the prediction as float32
    assert count == len(kept) and counted == sum(entry_bytes(k, value) for k in kept)
    assert MAX_BYTES - entry_bytes(kept[-1], value) < counted <= MAX_BYTES
    evicted = served.metric("pending_evicted_total")
    assert evicted == served.metric("predictions_kept_total") - len(kept) > 0

    served.client.label(MODEL, f"b-{n - 1:04d}", 1.0)  # the newest: still kept, joins
    served.client.label(MODEL, "b-0000", 1.0)  # the first: evicted, a dead letter
    eventually(lambda: served.redis.xlen(served.names.deadletter_key) == 1, 30, "a dead letter")
    letter = served.redis.xrange(served.names.deadletter_key)[0][1]
    assert letter[b"kind"] == b"unknown_id"
    joined = lambda: int(served.redis.get(served.names.ingest_count_key) or 0) == 1  # noqa: E731
    eventually(joined, 30, "the newest joined")


SHARED = """
[models.s]
inputs = 2
task = "regression"
architecture = "linear"

[models.s.labels]
max_pending = 1000
sender_share = 0.1
"""


def test_one_clients_flood_of_ids_evicts_only_its_own_kept_predictions(
    redis_server: embedded.ServerProcess,
    mosquitto_server: embedded.ServerProcess,
    tmp_path,
):
    """Issue 62, finding 2: a client asking with 1,100 unique ids (more than the pool's
    1,000) keeps at most its share (100), its own oldest evicted and counted; a control
    client's 5 predictions stay kept and their labels join, as without the flood."""
    settings = own_settings(redis_server, mosquitto_server)
    names = Names("s", settings.topic_prefix, settings.key_prefix)
    redis = redis_lib.Redis.from_url(settings.redis)
    cfg = parse_config(tomllib.loads(SHARED)).model("s")
    WeightsStore(redis, names).publish(codec.encode(tensors.get_arrays(networks.build_model(cfg))))
    config = tmp_path / "streamlearn.toml"
    config.write_text(SHARED)
    metrics_port = free_port()
    roles = [
        launch_role(settings, "actor", config, env={"STREAMLEARN_METRICS_PORT": str(metrics_port)}),
        launch_role(settings, "ingest", config),
    ]
    mine, flood = (
        streamlearn.Client(settings.mqtt, topic_prefix=settings.topic_prefix, client_id=c)
        for c in ("control", "flood")
    )
    served = Served(settings, names, redis, mine, "", f"http://127.0.0.1:{metrics_port}/metrics")
    try:
        for role in roles:
            role.wait_for(" ready")
        for i in range(5):
            assert "error" not in mine.request("s", {"x": [0.5, 1.0], "id": f"c-{i}"}, timeout=30)
        for start in range(0, 1100, 100):
            futures = [
                flood.request_async("s", {"x": [0.5, float(i)], "id": f"f-{i:04d}"}, 30)
                for i in range(start, start + 100)
            ]
            assert all("error" not in f.result() for f in futures)
        assert served.metric("pending_share_evicted_total") == 1000
        assert served.metric("pending_evicted_total") == 0
        kept = {k.decode().rsplit(":", 1)[1] for k in redis.zrange(names.pending_index_key, 0, -1)}
        assert kept == {f"c-{i}" for i in range(5)} | {f"f-{i:04d}" for i in range(1000, 1100)}
        for i in range(5):
            mine.label("s", f"c-{i}", 1.0)
        flood.label("s", "f-0000", 1.0)  # its own evicted: a dead letter it can see
        joined = lambda: int(redis.get(names.ingest_count_key) or 0) == 5  # noqa: E731
        eventually(joined, 30, "the control client's 5 labels joined")
        eventually(lambda: redis.xlen(names.deadletter_key) == 1, 30, "the flood's dead letter")
        assert redis.xrange(names.deadletter_key)[0][1][b"kind"] == b"unknown_id"
    finally:
        for c in (mine, flood):
            c.close()
        for role in roles:
            role.stop()
        for key in redis.scan_iter(f"{settings.key_prefix}:*"):
            redis.delete(key)
        redis.close()
