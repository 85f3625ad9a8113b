"""Labels that come later, joined by id to the predictions actors served: each becomes one
sample, a repeated label none, an unknown id a dead letter; and the served score in the
learner's status is the one the replies make. A label joins only the predictions asked
for on its sender's topic level (`predict/{client}`, `labels/{client}`), by typed id."""

from __future__ import annotations

import json
import math
import random
import time
import tomllib

import numpy as np
import pytest
import redis as redis_lib

import streamlearn
from streamlearn.cli.status import format_status
from streamlearn.config import parse_config
from streamlearn.contract.names import Names, owned
from streamlearn.nn import networks
from streamlearn.observe.monitor import read_status
from streamlearn.online import codec, tensors
from streamlearn.store.entries import unpack
from streamlearn.store.weights import WeightsStore
from tests.conftest import (
    Client,
    eventually,
    launch_role,
    own_settings,
    plain_paho,
    published,
    retained,
)

TOML = """
[models.l]
inputs = 2
task = "binary"
architecture = "linear"

[models.l.learner]
buckets = [256]  # one padded size, one trace before ready: batch sizes are not this test's
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

    asked = time.time()  # every prediction is served after this
    replies = [client.request({"x": [rng.random(), rng.random()], "id": f"r{i}"}) for i in range(N)]
    assert all("error" not in r for r in replies)
    labels = {r["id"]: rng.randint(0, 1) for r in replies}
    time.sleep(5)  # the labels come later

    device = plain_paho(settings)
    try:

        def send(items: list[dict]) -> None:  # on the labels topic of the requests' client
            body = json.dumps({"labels": items})
            topic = names.topic(f"labels/{client.device.client_id}")
            device.publish(topic, body, qos=1).wait_for_publish(10)

        items = [{"id": i, "y": y} for i, y in labels.items()]
        for start in range(0, N, 100):
            send(items[start : start + 100])
        eventually(lambda: stored(redis, names) == 64 + N, 30, "a sample per label")
        joined = time.time()  # every label was joined before this
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
    assert 5 <= got["delay_p50_s"] <= got["delay_p95_s"] <= joined - asked
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
    kept = [owned(None, "k1"), owned(None, "k2")]  # asked on bare predict: bare labels join
    PendingStore(redis, names, cfg.labels).keep(kept, [value, value])
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


# -- identity: whose predictions a label joins -------------------------------------------------

IDENTITY = """
[models.i]
inputs = 2
task = "regression"
architecture = "linear"
"""


@pytest.fixture(scope="module")
def served(redis_server, mosquitto_server, tmp_path_factory):
    """An ingest and an actor of model `i` (its initial weights, no learner), shared by the
    module's identity tests: (settings, names, redis)."""
    settings = own_settings(redis_server, mosquitto_server)
    names = Names("i", settings.topic_prefix, settings.key_prefix)
    store = redis_lib.Redis.from_url(settings.redis)
    cfg = parse_config(tomllib.loads(IDENTITY)).model("i")
    WeightsStore(store, names).publish(codec.encode(tensors.get_arrays(networks.build_model(cfg))))
    config = tmp_path_factory.mktemp("identity") / "streamlearn.toml"
    config.write_text(IDENTITY)
    procs = [launch_role(settings, role, config) for role in ("ingest", "actor")]
    try:
        for proc in procs:
            proc.wait_for(" ready")
        yield settings, names, store
    finally:
        for proc in procs:
            proc.stop()
        store.close()


def learned(store: redis_lib.Redis, names: Names) -> dict[float, list[float]]:
    """The stream's samples, what the learner learns: first input -> the targets it came with."""
    got: dict[float, list[float]] = {}
    for _, fields in store.xrange(names.samples_key):
        samples = unpack(fields, (2,))
        for x, y in zip(samples.x[:, 0].tolist(), samples.y.tolist(), strict=True):
            got.setdefault(x, []).append(y)
    return got


def labels_joined(store: redis_lib.Redis, names: Names) -> int:
    return int(store.hget(names.served_key, "labels") or 0)


def letters(store: redis_lib.Redis, names: Names, *marks: bytes) -> list[str]:
    """The kinds of the dead letters whose payload holds one of `marks`."""
    found = [f for _, f in store.xrange(names.deadletter_key)]
    return sorted(f[b"kind"].decode() for f in found if any(m in f[b"payload"] for m in marks))


def test_a_label_joins_only_predictions_asked_on_its_senders_topic(served):
    """Bob cannot label alice's predictions, nor burn the ids of her labels with samples;
    ids 42 and "42" are two predictions; each label's target is what is learned."""
    settings, names, store = served
    alice, bob = Client(settings, "i", "alice"), Client(settings, "i", "bob")
    raw = plain_paho(settings)

    def send(leaf: str, doc: dict) -> None:
        raw.publish(names.topic(leaf), json.dumps(doc), qos=1).wait_for_publish(10)

    try:
        for x0, rid in ((11, "42"), (12, 42), (13, "43")):
            assert "error" not in alice.request({"x": [x0, 0], "id": rid})
        assert "error" not in bob.request({"x": [14, 0], "id": "42"})
        before = labels_joined(store, names)
        # bob labels alice's "43" on his own topic (it joins only his own "42"); labels
        # "42" on the bare topic (the anonymous namespace's); sends samples with her ids
        send("labels/bob", {"labels": [{"id": "43", "y": -1}, {"id": "42", "y": 14}]})
        send("labels", {"id": "42", "y": -3})
        send("samples/bob", {"x": [15, 0], "y": 15, "id": "42"})
        send("samples", {"x": [[16, 0]], "y": [16], "ids": ["43"]})
        send("samples", {"x": [17, 0], "y": -4, "id": "\x1fl5:alice:s:42"})
        # alice's own labels, on her topic: "42" and 42 apart
        alice.device.label("i", "42", 11)
        send("labels/alice", {"labels": [{"id": 42, "y": 12}, {"id": "43", "y": 13}]})
        eventually(lambda: labels_joined(store, names) - before == 4, 30, "4 labels joined")
        marks = (b'"y": -3', b'"y": -4', b'"y": -1')
        eventually(lambda: len(letters(store, names, *marks)) == 3, 30, "the dead letters")
    finally:
        raw.disconnect()
        alice.close()
        bob.close()
    got = learned(store, names)
    assert {x: got.get(x) for x in (11, 12, 13, 14, 15, 16, 17)} == {
        11: [11.0],
        12: [12.0],
        13: [13.0],
        14: [14.0],
        15: [15.0],
        16: [16.0],
        17: None,
    }
    assert letters(store, names, *marks) == ["bad_string", "unknown_id", "unknown_id"]


def test_the_client_labels_its_own_requests_and_an_owners_from_another_client(served):
    """The Python client's predict -> label round trip joins; another client (another
    process, its own client id) labels them with `owner=`, and without it joins nothing."""
    settings, names, store = served
    url, prefix = settings.mqtt, settings.topic_prefix
    before = labels_joined(store, names)
    with streamlearn.Client(url, topic_prefix=prefix) as device:
        for x0 in (21, 22, 23):
            device.predict("i", [x0, 0], id=f"c-{x0}", timeout=10)
        device.label("i", "c-21", 21)
        owner = device.client_id
    with streamlearn.Client(url, topic_prefix=prefix) as labeller:
        labeller.labels("i", [("c-22", 22)], owner=owner)
        labeller.label("i", "c-23", -5)  # its own requests: none has this id
        labeller.label("i", "c-23", 23, owner=owner)
    eventually(lambda: labels_joined(store, names) - before == 3, 30, "3 labels joined")
    eventually(lambda: letters(store, names, b"-5"), 30, "the unknown label's dead letter")
    got = learned(store, names)
    assert {x: got.get(x) for x in (21, 22, 23)} == {21: [21.0], 22: [22.0], 23: [23.0]}
