"""Labels that come later, joined by id to the predictions actors served: each becomes one
sample, a repeated label none, an unknown id a dead letter; and the served score in the
learner's status is the one the replies make."""

from __future__ import annotations

import json
import math
import random
import time
import tomllib

import numpy as np

from streamlearn.cli.status import format_status
from streamlearn.config import parse_config
from streamlearn.contract.names import Names
from streamlearn.observe.monitor import read_status
from tests.conftest import eventually, plain_paho, published, retained

TOML = """
[models.l]
inputs = 2
task = "binary"
architecture = "linear"
"""
N = 600


def stored(redis, names: Names) -> int:
    """Samples ever appended (the learner may have trimmed the stream since)."""
    return int(redis.get(names.ingest_count_key) or 0)


def test_labels_join_served_predictions_once_and_score_them(
    start_role, client_for, redis, settings
):
    names = Names("l", settings.topic_prefix, settings.key_prefix)
    start_role("ingest", TOML)
    start_role("learner", TOML)
    start_role("actor", TOML)
    client = client_for("l")
    rng = random.Random(7)
    client.publish_samples([{"x": [rng.random(), rng.random()], "y": i % 2} for i in range(64)])
    eventually(lambda: published(redis, names)[0] >= 1, 60, "a first version")

    replies = [client.request({"x": [rng.random(), rng.random()], "id": f"r{i}"}) for i in range(N)]
    assert all("error" not in r for r in replies)
    served = time.time()
    labels = {r["id"]: rng.randint(0, 1) for r in replies}
    time.sleep(5)  # the labels come later

    device = plain_paho(settings)
    try:

        def send(items: list[dict]) -> None:
            body = json.dumps({"labels": items})
            device.publish(names.labels_topic, body, qos=1).wait_for_publish(10)

        items = [{"id": i, "y": y} for i, y in labels.items()]
        for start in range(0, N, 100):
            send(items[start : start + 100])
        arrived = time.time()
        eventually(lambda: stored(redis, names) == 64 + N, 30, "a sample per label")
        send(items[:50])  # a second copy adds nothing
        send([{"id": "never-served", "y": 1}, {"id": "r1", "y": 7}])
    finally:
        device.disconnect()
    # one ingest takes the messages in order: the copies were judged before these
    eventually(lambda: redis.xlen(names.deadletter_key) == 2, 30, "the dead letters")
    assert stored(redis, names) == 64 + N

    letters = [f for _, f in redis.xrange(names.deadletter_key)]
    kinds = sorted(f[b"kind"].decode() for f in letters)
    assert kinds == ["bad_target", "unknown_id"]
    assert any(b"never-served" in f[b"reason"] for f in letters)

    def score() -> dict | None:
        status = retained(settings, names.status_topic)
        done = status and status.get("served") and status["served"]["unknown"] == 1
        return status["served"] if done else None

    got = eventually(score, 60, "the served score in the status")
    p = np.clip([r["y"] for r in replies], 1e-7, 1 - 1e-7)
    y = np.array([labels[r["id"]] for r in replies], np.float64)
    loss = float(np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p))))
    accuracy = sum((r["y"] > 0.5) == (labels[r["id"]] > 0.5) for r in replies) / N
    assert got["labels"] == N
    assert math.isclose(got["loss"], loss, abs_tol=1e-4)
    assert got["accuracy"] == accuracy
    assert 5 <= got["delay_p50_s"] <= got["delay_p95_s"] <= arrived - served + 5 + 1
    table = format_status(read_status(parse_config(tomllib.loads(TOML)), settings))
    assert f"served: {N} labels, loss {got['loss']:.4f}, accuracy {accuracy:.4f}" in table


HOSTILE = [
    b"",
    b"[]",
    b'{"labels": []}',
    b'{"labels": {}}',
    b'{"labels": [{"id": "k1", "y": 1}], "more": 1}',
    b'{"id": "k1"}',
    b'{"y": 1}',
    b'{"id": true, "y": 1}',
    b'{"id": "k1", "y": 1e400}',
    b'{"id": "k1", "y": "1"}',
    b'{"id": "", "y": 1}',
    b'{"id": "k1", "y": 1, "z": 2}',
    b'{"labels": ' + b"[" * 100_000 + b"}",
    b'{"id": "k1", "y": ' + b"9" * 5000 + b"}",
    b"\xff\xfe",
]


def test_hostile_label_messages_cost_a_dead_letter_each_and_good_labels_still_join(redis, settings):
    """In process, as paho's thread hands messages over: each hostile message is one dead
    letter, a mixed one joins its good labels, and the worker goes on."""
    from paho.mqtt.client import MQTTMessage
    from paho.mqtt.enums import CallbackAPIVersion

    from streamlearn.config import ModelConfig
    from streamlearn.contract.payloads import PayloadParser
    from streamlearn.ingest.loop import Ingest
    from streamlearn.mqtt import BufferedClient
    from streamlearn.store.pending import PendingStore, encode
    from streamlearn.store.stream import SampleStream

    cfg = ModelConfig(name="h", inputs=2, task="binary")
    names = Names("h", settings.topic_prefix, settings.key_prefix)
    value = encode(np.array([1, 2], np.float32), np.array([0.9], np.float32), 1, time.time())
    PendingStore(redis, names, cfg.labels).keep(["k1", "k2"], [value, value])
    ingest = Ingest(PayloadParser(cfg), SampleStream.of(redis, names, cfg), cfg.ingest)
    mixed = {"labels": [{"id": "k1", "y": 1}, {"id": "k2", "y": 3}, {"y": 0}, 7]}
    batch = [*HOSTILE, json.dumps(mixed).encode(), b'{"id": "k1", "y": 1}']
    device = BufferedClient(CallbackAPIVersion.VERSION2)  # never connected: acks go nowhere
    for mid, raw in enumerate(batch, 1):
        msg = MQTTMessage(mid, names.labels_topic.encode())
        msg.payload, msg.qos = raw, 1
        ingest.on_message(device, None, msg)
    assert ingest.run(max_messages=len(batch)) == len(batch)
    letters = [f for _, f in redis.xrange(names.deadletter_key)]
    assert len(letters) == len(HOSTILE) + 1
    assert b"3 of 4 labels rejected" in letters[-1][b"reason"]
    assert int(redis.get(names.ingest_count_key)) == 1, "k1 once: the repeat is a duplicate"
    assert int(redis.hget(names.served_key, "labels")) == 1
    assert ingest.metrics()["labels_duplicate_total"] == 1
