"""Samples assembled from several topics (`[models.NAME.assembly]`): plain values held per
device key in Redis, a label forming a sample, exactly once across redeliveries and ingest
processes, bounded keys, stale inputs missing; and what is learned from an assembled
stream equals what is learned from the same samples sent whole."""

from __future__ import annotations

import dataclasses
import json
import tomllib

import numpy as np
from paho.mqtt.client import MQTTMessage
from paho.mqtt.enums import CallbackAPIVersion

from streamlearn.config import parse_config
from streamlearn.contract.names import Names
from streamlearn.contract.payloads import PayloadParser
from streamlearn.ingest.inbox import Delivery
from streamlearn.ingest.loop import Ingest
from streamlearn.mqtt import BufferedClient
from streamlearn.store.entries import unpack
from streamlearn.store.held import HeldStore, Reading
from streamlearn.store.stream import SampleStream
from tests.conftest import eventually, plain_paho

STATESTREAM = """
[models.room]
inputs = ["kitchen_temp", "kitchen_humidity", "window_open"]
target = "occupied"
task = "binary"
architecture = "linear"

[models.room.assembly]
max_age_s = 600
max_age_s_of = { window_open = 86400 }

[[models.room.sources]]
topic = "homeassistant/+/+/state"
field = "topic:2"

[[models.room.sources]]
topic = "zigbee/+/set"
key = "topic:1"
key_from_payload = true
"""


def model(toml: str = STATESTREAM, name: str = "room"):
    return parse_config(tomllib.loads(toml)).model(name)


def worker(redis, names: Names, toml: str = STATESTREAM, clock=None) -> Ingest:
    cfg = model(toml, names.model)
    ingest = Ingest(PayloadParser(cfg), SampleStream.of(redis, names, cfg), cfg.ingest)
    if clock is not None:
        assert ingest.assembly is not None
        ingest.assembly.clock = clock
    return ingest


def deliver(ingest: Ingest, messages: list[tuple[str, bytes]]) -> None:
    """Hand `messages` to `ingest` as paho's thread does, and process them all."""
    device = BufferedClient(CallbackAPIVersion.VERSION2)  # never connected: acks go nowhere
    for mid, (topic, raw) in enumerate(messages, 1):
        msg = MQTTMessage(mid, topic.encode())
        msg.payload, msg.qos = raw, 1
        ingest.on_message(device, None, msg)
    assert ingest.run(max_messages=len(messages)) == len(messages)


def stream(redis, names: Names, inputs: int) -> tuple[np.ndarray, np.ndarray, list]:
    """The stream's samples: x, y and ids, in order."""
    xs, ys, ids = [], [], []
    for _, fields in redis.xrange(names.samples_key):
        s = unpack(fields, (inputs,))
        xs.append(s.x)
        ys.append(s.y)
        ids += list(s.ids or [None] * len(s))
    if not xs:
        return np.empty((0, inputs)), np.empty(0), []
    return np.concatenate(xs), np.concatenate(ys), ids


def letters(redis, names: Names) -> list[tuple[str, str]]:
    return [
        (f[b"kind"].decode(), f[b"reason"].decode()) for _, f in redis.xrange(names.deadletter_key)
    ]


def ha(entity: str, body: bytes | str, domain: str = "sensor") -> tuple[str, bytes]:
    raw = body.encode() if isinstance(body, str) else body
    return f"homeassistant/{domain}/{entity}/state", raw


def test_statestream_values_across_topics_form_a_sample_through_the_broker(
    start_role, redis, settings
):
    """Home Assistant publishes one plain value per entity topic; the label, on its own
    topic, forms one sample of the values held (`unavailable`: missing)."""
    names = Names("room", settings.topic_prefix, settings.key_prefix)
    start_role("ingest", STATESTREAM)
    device = plain_paho(settings)
    try:
        for topic, body in [
            ha("kitchen_temp", "21.4"),
            ha("kitchen_humidity", "unavailable"),
            ha("window_open", "on", "binary_sensor"),
            ha("occupied", "on", "binary_sensor"),
        ]:
            device.publish(topic, body, qos=1).wait_for_publish(10)
    finally:
        device.disconnect()
    eventually(lambda: redis.get(names.ingest_count_key) == b"1", 20, "the assembled sample")
    x, y, ids = stream(redis, names, 3)
    assert x[0, 0] == np.float32(21.4) and np.isnan(x[0, 1]) and x[0, 2] == 1
    assert y.tolist() == [1.0] and ids[0].endswith(ids[0][-12:])
    assert int(redis.hget(names.fields_key, "missing:kitchen_humidity")) == 1
    assert letters(redis, names) == []


def test_a_redelivered_label_is_a_duplicate_and_a_new_one_a_new_sample(redis, settings):
    names = Names("room", settings.topic_prefix, settings.key_prefix)
    ingest = worker(redis, names)
    label = ha("occupied", "on", "binary_sensor")
    deliver(ingest, [ha("kitchen_temp", "20"), ha("kitchen_humidity", "40"), label])
    deliver(ingest, [label])  # the broker's redelivery of the same message
    assert ingest.counters.samples == 1 and ingest.counters.duplicates == 1
    deliver(ingest, [ha("kitchen_temp", "23"), ha("occupied", "off", "binary_sensor")])
    x, y, ids = stream(redis, names, 3)
    assert x[:, 0].tolist() == [20, 23] and y.tolist() == [1, 0]
    assert len(set(ids)) == 2
    # a worker that held a label and stopped before appending its sample: the broker
    # redelivers it, and it forms the same id, appended now
    topic, body = ha("occupied", "on", "binary_sensor")
    assembly = ingest.assembly
    assert assembly is not None
    reading = assembly.read(Delivery(0, None, 9, 1, topic, body), None, assembly.model.sources[0])
    assert isinstance(reading, Reading)
    [held] = assembly.hold([(Delivery(0, None, 9, 1, topic, body), reading)])
    deliver(ingest, [(topic, body)])
    _, y, ids = stream(redis, names, 3)
    assert y.tolist() == [1, 0, 1] and ids[-1] == held.samples.ids[0]
    assert ingest.counters.duplicates == 1


def test_two_ingest_workers_sharing_the_load_form_no_duplicate_samples(redis, settings):
    """Each worker holds what it is given and sees what the other held; a label delivered
    to both (a redelivery to the other after a crash) is one sample."""
    names = Names("room", settings.topic_prefix, settings.key_prefix)
    one, two = worker(redis, names), worker(redis, names)
    for i in range(10):
        deliver(one, [ha("kitchen_temp", str(20 + i))])
        deliver(two, [ha("kitchen_humidity", str(40 + i))])
        label = ha("occupied", "on" if i % 2 else "off", "binary_sensor")
        deliver(one if i % 2 else two, [label])
        deliver(two if i % 2 else one, [label])
    x, y, _ = stream(redis, names, 3)
    assert len(y) == 10, "one sample per label, whichever worker formed it"
    assert x[:, 0].tolist() == [20 + i for i in range(10)]
    assert x[:, 1].tolist() == [40 + i for i in range(10)]
    assert one.counters.duplicates + two.counters.duplicates == 10


def test_a_flood_of_new_keys_is_refused_without_growing_the_held_state(redis, settings):
    toml = STATESTREAM.replace("max_age_s = 600", "max_age_s = 600\nmax_keys_per_sender = 5")
    names = Names("room", settings.topic_prefix, settings.key_prefix)
    ingest = worker(redis, names, toml)
    flood = [
        ("zigbee/gw/set", json.dumps({"key": f"d{i}", "kitchen_temp": i}).encode())
        for i in range(50)
    ]
    deliver(ingest, flood)
    held = HeldStore(redis, names)
    assert held.size() == 5
    kinds = [k for k, _ in letters(redis, names)]
    assert kinds == ["too_many_keys"] * 45
    assert len(list(redis.scan_iter(held.key("*")))) == 5


def test_a_stale_input_counts_as_missing(redis, settings):
    names = Names("room", settings.topic_prefix, settings.key_prefix)
    now = [1_000_000.0]
    ingest = worker(redis, names, clock=lambda: now[0])
    deliver(ingest, [ha("kitchen_temp", "20"), ha("kitchen_humidity", "40")])
    deliver(ingest, [ha("window_open", "off", "binary_sensor")])
    now[0] += 601  # the temperature and humidity are stale, the window (a day) is not
    deliver(ingest, [ha("kitchen_temp", "22"), ha("occupied", "on", "binary_sensor")])
    x, _, _ = stream(redis, names, 3)
    assert x[0, 0] == 22 and np.isnan(x[0, 1]) and x[0, 2] == 0
    assert ingest.counters.fields.missing == {"kitchen_humidity": 1}
    now[0] += 86_400  # now two of three: more than max_missing (0.5)
    deliver(ingest, [ha("occupied", "off", "binary_sensor")])
    assert [k for k, _ in letters(redis, names)] == ["missing_field"]


def test_on_a_period_each_key_with_a_fresh_target_forms_one_sample_across_workers(redis, settings):
    toml = STATESTREAM.replace("max_age_s = 600", "max_age_s = 600\nevery_s = 10")
    names = Names("room", settings.topic_prefix, settings.key_prefix)
    now = [1_000_005.0]
    one, two = (
        worker(redis, names, toml, lambda: now[0]),
        worker(redis, names, toml, lambda: now[0]),
    )
    deliver(one, [ha("kitchen_temp", "20"), ha("kitchen_humidity", "40")])
    deliver(two, [ha("occupied", "on", "binary_sensor")])  # a label: one sample
    for _ in range(3):  # three periods, each ticked by both workers
        now[0] += 10
        deliver(one, [ha("kitchen_temp", "21")])
        deliver(two, [ha("kitchen_humidity", "41")])
    x, y, ids = stream(redis, names, 3)
    assert len(ids) == 4 and len(set(ids)) == 4 and y.tolist() == [1] * 4
    assert [i.rpartition("|")[2] for i in ids[1:]] == ["p100001", "p100002", "p100003"]
    assert one.assembly.periodic + two.assembly.periodic == 6  # formed twice, stored once
    # the window never reported: missing in each of the 4 samples, counted once each
    missing = [w.counters.fields.missing.get("window_open", 0) for w in (one, two)]
    assert sum(missing) == 4, missing


def test_learning_from_an_assembled_stream_equals_learning_from_whole_samples(redis, settings):
    """The same generated stream, sent whole on the samples topic and sent as Home
    Assistant sends it (a value per topic, the label beside the humidity): the stream
    holds the same samples, and a model learns them to the same accuracy."""
    from streamlearn.online.model import OnlineModel
    from streamlearn.online.spec import LearningSpec

    cfg = model()
    rng = np.random.default_rng(7)
    n = 300
    temp, humidity = rng.normal(21, 3, n).round(2), rng.normal(45, 10, n).round(1)
    window = rng.random(n) < 0.3
    occupied = ((temp - 21) / 3 + (humidity - 45) / 10 - 2 * window > 0).astype(int)
    whole = Names("room", settings.topic_prefix, settings.key_prefix + "w")
    assembled = Names("room", settings.topic_prefix, settings.key_prefix + "a")
    sent, readings = [], []
    for t, h, w, y in zip(temp, humidity, window, occupied, strict=True):
        doc = {"kitchen_temp": t, "kitchen_humidity": h, "window_open": int(w), "occupied": int(y)}
        sent.append((whole.samples_topic, json.dumps(doc).encode()))
        label = json.dumps({"kitchen_humidity": h, "occupied": int(y)})
        readings += [ha("kitchen_temp", str(t)), ha("window_open", "on" if w else "off")]
        readings.append(ha("kitchen_humidity", label))
    deliver(worker(redis, whole), sent)
    deliver(worker(redis, assembled), readings)
    x_whole, y_whole, _ = stream(redis, whole, 3)
    x_assembled, y_assembled, _ = stream(redis, assembled, 3)
    assert len(y_assembled) == n
    np.testing.assert_array_equal(x_assembled, x_whole)
    np.testing.assert_array_equal(y_assembled, y_whole)
    # a small network, no replay: what counts is the same figure, and it costs a second
    spec = dataclasses.replace(cfg.spec, heads="last", memory=0, steps=False)
    accuracy = []
    for x, y in ((x_whole, y_whole), (x_assembled, y_assembled)):
        learner = OnlineModel(spec, LearningSpec(replay_ratio=0, buckets=(32,)), seed=0)
        for start in range(0, n, 30):  # as the learner takes messages
            learner.learn_many(x[start : start + 30], y[start : start + 30])
        accuracy.append(learner.figures()["online_metric"])
    assert abs(accuracy[0] - accuracy[1]) <= 0.01 and accuracy[1] > 0.6
    for name in (whole, assembled):
        for key in redis.scan_iter(f"{name.key_prefix}:*"):
            redis.delete(key)


def test_a_window_models_assembled_samples_are_steps_once_each(redis, settings):
    """A label forms one step of its key's window at its first arrival: a redelivered
    label is the same step again (a duplicate), a full window a training sample."""
    toml = STATESTREAM.replace('architecture = "linear"', 'architecture = "lstm"\nwindow = 2')
    names = Names("room", settings.topic_prefix, settings.key_prefix)
    now = [2_000_000.0]
    ingest = worker(redis, names, toml, lambda: now[0])
    labels = [
        ("zigbee/dev-1/set", json.dumps({"kitchen_temp": t, "occupied": t % 2}).encode())
        for t in (20, 21, 22)
    ]
    deliver(
        ingest, [ha("kitchen_humidity", "40"), ("zigbee/dev-1/set", b'{"kitchen_humidity": 41}')]
    )
    for label in labels:
        now[0] += 1
        deliver(ingest, [label])
    deliver(ingest, [labels[1]])  # redelivered: its step is stored already
    c = ingest.counters
    assert (c.observations, c.duplicate_observations, c.short_windows) == (3, 1, 1)
    assert c.samples == 2  # the windows ending at the second and third steps
    steps = redis.zrange(names.stream_key("window:dev-1"), 0, -1, withscores=True)
    assert [seq for _, seq in steps] == [2_000_001.0, 2_000_002.0, 2_000_003.0]
