"""Device states (`streamlearn.actor.states`, `streamlearn.actor.discovery`), without a
broker or Redis: the throttle, the bound and its clears (the index's script in memory, as
`lua/states_touch.lua` does it; tests/integration/test_states.py runs the real one), the
readings read and those refused, and the Home Assistant discovery payload against the MQTT
sensor's documented schema."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import paho.mqtt.client as paho
import pytest
import redis

from streamlearn.actor.devices import Devices, Reading
from streamlearn.actor.discovery import config_topic, is_own_state_echo, object_id, sensor_config
from streamlearn.actor.states import States
from streamlearn.config import ModelConfig
from streamlearn.contract.names import Names
from streamlearn.errors import ConfigError
from streamlearn.store.state_index import Touched


class Broker:
    """What a broker retains of the publishes: an empty retained payload clears a topic."""

    def __init__(self) -> None:
        self.retained: dict[str, bytes] = {}
        self.sent: list[tuple[str, bytes]] = []

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool, _props: object) -> None:
        assert qos == 1 and retain
        self.sent.append((topic, payload))
        if payload:
            self.retained[topic] = payload
        else:
            self.retained.pop(topic, None)

    def states(self, names: Names) -> dict[str, dict]:
        prefix = names.topic("state/")
        return {
            t[len(prefix) :]: json.loads(p)
            for t, p in self.retained.items()
            if t.startswith(prefix)
        }


class Index:
    """`lua/states_touch.lua` in memory: the newest time of each key, at most `bound` keys,
    the oldest (then the least key) taken out. `down`: Redis refuses."""

    def __init__(self, bound: int) -> None:
        self.bound, self.times, self.down = bound, {}, False

    def touch(self, stamped: list[tuple[str, float]], checks: list[str]) -> Touched:
        if self.down:
            raise redis.ConnectionError("Redis away")
        absent = [k for k in checks if k not in self.times]
        new = [k for k, _ in stamped if k not in self.times]
        for key, at in stamped:
            self.times[key] = max(at, self.times.get(key, at))
        order = sorted(self.times, key=lambda k: (self.times[k], k))
        gone = order[: max(0, len(order) - self.bound)]
        for key in gone:
            del self.times[key]
        return Touched(new, gone, absent)


class FakeActor:
    """What `States.serve` asks of the actor: the version serving and its forward pass."""

    def __init__(self, version: int = 3, windows: object = None) -> None:
        self.version, self.variant, self.answers_initial = version, "base", True
        self.policy = SimpleNamespace(max_batch=64)
        self.windows = windows
        self.rows: list[int] = []

    def predict(self, x: np.ndarray) -> np.ndarray:
        self.rows.append(len(x))
        flat = x.reshape(len(x), -1)
        return flat.sum(axis=1, keepdims=True)  # y: the sum of the inputs (of the window)


def model(**state: object) -> ModelConfig:
    return ModelConfig(
        name="room",
        inputs=["temperature", "humidity"],
        sources=[{"topic": "zigbee2mqtt/+", "key": "topic:1"}],
        state=state,
    )


def states(cfg: ModelConfig, index: Index | None = None) -> tuple[States, Broker, Names]:
    broker, names = Broker(), Names(cfg.name)
    assert cfg.state is not None
    index = index or Index(cfg.state.max_devices)
    return States(cfg, names, broker.publish, index), broker, names


def reading(s: States, device: str, t: float, **more: object) -> None:
    s.on_reading(f"zigbee2mqtt/{device}", json.dumps({"temperature": t, "humidity": 1, **more}))


# -- the throttle -------------------------------------------------------------------------


def test_readings_within_the_period_keep_the_newest_published_when_it_ends():
    d = Devices(max_devices=10, every_s=5)
    d.offer("a", Reading(np.array([[1.0]])), now=0)
    assert [r.x[0, 0] for _, r in d.take(now=0, limit=8)] == [1.0], "the first goes at once"
    d.offer("a", Reading(np.array([[2.0]])), now=1)
    d.offer("a", Reading(np.array([[3.0]])), now=2)
    assert d.take(now=4.9, limit=8) == [], "within the period: held"
    taken = d.take(now=5, limit=8)
    assert [r.x[0, 0] for _, r in taken] == [3.0], "at its end: the newest, once"
    assert d.replaced == 1
    assert d.take(now=100, limit=8) == [], "nothing waits"


def test_a_turn_takes_at_most_its_limit_and_the_rest_wait_their_turn():
    d = Devices(max_devices=100, every_s=0)
    for i in range(10):
        d.offer(f"k{i}", Reading(np.zeros((1, 1))), now=0)
    assert len(d.take(now=0, limit=4)) == 4
    assert len(d.take(now=0, limit=100)) == 6


def test_states_carry_the_prediction_its_version_and_a_time_at_most_every_every_s():
    s, broker, names = states(model(every_s=3600))
    actor = FakeActor(version=7)
    reading(s, "kitchen", 20)
    reading(s, "hall", 10)
    s.serve(actor)
    got = broker.states(names)
    assert {k: (v["y"], v["version"], v["model"]) for k, v in got.items()} == {
        "kitchen": (21.0, 7, "room"),
        "hall": (11.0, 7, "room"),
    }
    assert set(got["kitchen"]) >= {"key", "y", "version", "variant", "at"}
    reading(s, "kitchen", 30)
    s.serve(actor)
    assert broker.states(names)["kitchen"]["y"] == 21.0, "within every_s: not yet"
    assert s.metrics()["states_published_total"] == 2


# -- the bound ----------------------------------------------------------------------------


def test_a_flood_of_new_keys_keeps_the_retained_states_within_max_devices():
    s, broker, names = states(model(every_s=0, max_devices=5, discovery=True))
    actor = FakeActor()
    for i in range(200):
        reading(s, f"flood-{i}", i)
        if i % 7 == 0:
            s.serve(actor)
    s.serve(actor)
    assert len(s.devices) == 5
    retained = broker.states(names)
    assert set(retained) == {f"flood-{i}" for i in range(195, 200)}
    configs = [t for t in broker.retained if t.startswith("homeassistant/")]
    assert len(configs) == len(retained), "each shown key's config, no other"
    figures = s.metrics()  # keys evicted before their turn came were never published
    assert figures["states_cleared_total"] == figures["states_published_total"] - 5
    cleared = {t for t, p in broker.sent if not p}
    assert names.topic("state/flood-0") in cleared
    assert config_topic("homeassistant", object_id("room", "flood-0")) in cleared
    assert len(s.devices._due) <= 2 * 5 + 1024, "the due queue is bounded too"


def test_a_state_predicted_after_its_key_was_evicted_is_not_published():
    s, broker, names = states(model(every_s=0, max_devices=1))

    class Evicting(FakeActor):
        def predict(self, x: np.ndarray) -> np.ndarray:
            reading(s, "newcomer", 1)  # paho's thread, while the pass runs
            return super().predict(x)

    reading(s, "first", 1)
    s.serve(Evicting())
    assert broker.states(names) == {}, "first was evicted: its state would outlive the bound"


def test_two_actors_keep_one_bound_between_them():
    """The broker's shared subscription hands a key's readings to either actor: each
    tracks its own keys, and the index they share bounds the states retained."""
    cfg = model(every_s=0, max_devices=4, discovery=True)
    index = Index(4)
    (a, broker, names), (b, _, _) = states(cfg, index), states(cfg, index)
    b.publish = broker.publish  # one broker
    for i in range(40):
        reading(a if i % 2 else b, f"k{i}", i)
        a.serve(FakeActor())
        b.serve(FakeActor())
    assert set(broker.states(names)) == {"k36", "k37", "k38", "k39"}, "4, not 4 an actor"
    configs = {t for t in broker.retained if t.startswith("homeassistant/")}
    assert configs == {config_topic("homeassistant", object_id("room", f"k{i}")) for i in
                       range(36, 40)}  # fmt: skip


class Late:
    """One actor's connection, slower than another's: what it publishes reaches the broker
    at `flush`, and until then paho's `is_published` says no."""

    def __init__(self, broker: Broker) -> None:
        self.broker, self.held = broker, []

    def publish(self, *packet: object) -> SimpleNamespace:
        sent = SimpleNamespace(arrived=False)
        sent.is_published = lambda: sent.arrived
        self.held.append((packet, sent))
        return sent

    def flush(self) -> None:
        for packet, sent in self.held:
            self.broker.publish(*packet)
            sent.arrived = True
        self.held = []


def test_a_config_that_reaches_the_broker_after_another_actors_clear_is_cleared_too():
    """Actor a indexes k1 and sends its state and config; b takes k1 out past the bound
    and clears it, and its clear reaches the broker before a's publishes. Once the broker
    acknowledged them, a finds k1 gone from the index and clears it itself."""
    cfg = model(every_s=0, max_devices=1, discovery=True)
    index = Index(1)
    (a, broker, names), (b, _, _) = states(cfg, index), states(cfg, index)
    b.publish = broker.publish
    late = Late(broker)
    a.publish = late.publish
    reading(a, "k1", 1)
    a.serve(FakeActor())
    reading(b, "k2", 2)
    b.serve(FakeActor())  # k1 taken out and cleared, before a's publishes arrive
    late.flush()
    assert "k1" in broker.states(names), "the race: a's state and config outlive the clear"
    a.serve(FakeActor())  # acknowledged: checked
    late.flush()
    assert set(broker.states(names)) == {"k2"}
    configs = {t for t in broker.retained if t.startswith("homeassistant/")}
    assert configs == {config_topic("homeassistant", object_id("room", "k2"))}
    assert a.metrics()["states_cleared_total"] == 1


def test_states_an_earlier_life_left_are_indexed_at_their_time_and_the_oldest_cleared():
    s, broker, names = states(model(every_s=0, max_devices=2))
    for key, at in (("old-1", 30), ("old-2", 10), ("old-3", 20)):
        msg = paho.MQTTMessage(topic=names.topic(f"state/{key}").encode())
        msg.payload, msg.retain = json.dumps({"y": 1, "at": at}).encode(), True
        s.on_state(msg)
    live = paho.MQTTMessage(topic=names.topic("state/other").encode())
    live.payload = b'{"y": 2, "at": 1}'  # another actor's, live: indexed by that actor
    s.on_state(live)
    s.serve(FakeActor())
    assert broker.sent == [(names.topic("state/old-2"), b"")], "past the bound: the oldest"
    reading(s, "new", 1)
    s.serve(FakeActor())
    assert "new" in broker.states(names)
    assert (names.topic("state/old-3"), b"") in broker.sent, "the next oldest went"


def test_with_redis_away_states_wait_to_be_indexed_within_the_bound():
    index = Index(3)
    s, broker, names = states(model(every_s=0, max_devices=3), index)
    index.down = True
    for i in range(5):
        reading(s, f"k{i}", i)
        s.serve(FakeActor())
    assert set(broker.states(names)) == {"k2", "k3", "k4"}, "the oldest cleared meanwhile"
    assert s.metrics()["state_index_failures_total"] == 1, "tried again after a pause"
    index.down = False
    s._retry_at = 0  # the pause over
    s.serve(FakeActor())
    assert set(index.times) == {"k2", "k3", "k4"}


# -- what is read -------------------------------------------------------------------------


def test_a_reading_that_does_not_parse_costs_a_count_and_takes_no_key_in():
    s, broker, _ = states(model(every_s=0, max_devices=1))
    s.on_reading("zigbee2mqtt/a", b"not json")
    reading(s, "b", "warm")  # a string where a number goes
    s.on_reading("zigbee2mqtt/" + "x" * 200, b'{"temperature": 1, "humidity": 1}')
    s.serve(FakeActor())
    assert len(s.devices) == 0 and broker.sent == []
    assert s.metrics()["state_readings_unread_total"] == 3


def test_a_labelled_reading_and_a_positional_one_are_read_too():
    s, broker, names = states(model(every_s=0))
    reading(s, "a", 5, y=1.5, linkquality=120)  # a sample: its target and an unused field
    s.serve(FakeActor())
    assert broker.states(names)["a"]["y"] == 6.0
    cfg = ModelConfig(
        name="p", inputs=2, sources=[{"topic": "dev/+/x", "key": "topic:1"}], state={}
    )
    s, broker, names = states(cfg)
    s.on_reading("dev/d1/x", b'{"x": [1, 2], "y": 0}')
    s.serve(FakeActor())
    assert broker.states(names)["d1"]["y"] == 3.0


def test_home_assistants_echo_of_our_own_state_is_never_a_reading():
    cfg = ModelConfig(
        name="ha",
        inputs=["state"],
        sources=[{"topic": "homeassistant/sensor/+/state", "key": "topic:2"}],
        state={"every_s": 0},
    )
    s, broker, names = states(cfg)
    echo = f"homeassistant/sensor/{object_id('ha', 'x')}/state"
    assert is_own_state_echo(echo) and is_own_state_echo(echo.replace("streamlearn", "StreamLearn"))
    s.on_reading(echo, b'{"state": 0.4}')
    s.on_reading("homeassistant/sensor/outdoor_temperature/state", b'{"state": 12}')
    s.serve(FakeActor())
    assert list(broker.states(names)) == ["outdoor_temperature"]
    assert s.metrics()["state_echoes_total"] == 1


def test_a_window_models_state_is_predicted_from_the_keys_stored_window():
    class Windows:
        window = 3

        def recent(self, requests, count):
            return [np.full((count, 1), 10.0, np.float32) if k == "full" else
                    np.zeros((0, 1), np.float32) for k, _ in requests]  # fmt: skip

    cfg = ModelConfig(
        name="w",
        inputs=["t"],
        window=3,
        architecture="lstm",
        sources=[{"topic": "dev/+", "key": "topic:1"}],
        state={"every_s": 0},
    )
    s, broker, names = states(cfg)
    s.on_reading("dev/full", b'{"t": 1, "seq": 5}')
    s.on_reading("dev/new", b'{"t": 1, "seq": 5}')
    s.serve(FakeActor(windows=Windows()))
    assert set(broker.states(names)) == {"full"}
    assert broker.states(names)["full"]["y"] == 21.0, "two stored steps and the reading's own"
    assert s.metrics()["state_readings_failed_total"] == 1, "too few steps known: no state"


def test_a_multiclass_state_names_its_most_probable_class():
    cfg = ModelConfig(
        name="mc",
        inputs=["a", "b"],
        task="multiclass",
        classes=3,
        sources=[{"topic": "dev/+", "key": "topic:1"}],
        state={"every_s": 0, "discovery": True},
    )
    s, broker, names = states(cfg)
    actor = FakeActor()
    actor.predict = lambda x: np.array([[0.2, 0.7, 0.1]] * len(x))  # type: ignore[method-assign]
    s.on_reading("dev/d", b'{"a": 1, "b": 2}')
    s.serve(actor)
    state = broker.states(names)["d"]
    assert state["class"] == 1 and state["y"] == pytest.approx([0.2, 0.7, 0.1])


def test_a_state_table_needs_a_source_with_a_device_key():
    cfg = ModelConfig(name="n", inputs=1, sources=[{"topic": "dev/+"}], state={})
    with pytest.raises(ConfigError, match='key = "topic:N"'):
        States(cfg, Names("n"), Broker().publish, Index(1))


# -- Home Assistant's MQTT sensor discovery schema ------------------------------------------

# https://www.home-assistant.io/integrations/sensor.mqtt/ (Configuration Variables), with
# `origin` of https://www.home-assistant.io/integrations/mqtt/#discovery-payload.
HA_SENSOR_REQUIRED = {"state_topic"}
HA_SENSOR_KEYS = HA_SENSOR_REQUIRED | {
    "availability", "availability_mode", "availability_template", "availability_topic",
    "device", "device_class", "enabled_by_default", "encoding", "entity_category",
    "entity_picture", "expire_after", "force_update", "icon", "json_attributes_template",
    "json_attributes_topic", "last_reset_value_template", "name", "object_id", "options",
    "payload_available", "payload_not_available", "suggested_display_precision", "qos",
    "state_class", "unique_id", "unit_of_measurement", "value_template", "origin",
}  # fmt: skip
HA_DEVICE_KEYS = {
    "configuration_url", "connections", "hw_version", "identifiers", "manufacturer", "model",
    "model_id", "name", "serial_number", "suggested_area", "sw_version", "via_device",
}  # fmt: skip
HA_STATE_CLASSES = {"measurement", "total", "total_increasing"}
TEMPLATE = re.compile(r"^\{\{.*\}\}$")


@pytest.mark.parametrize("task", ["regression", "binary", "multiclass"])
def test_the_discovery_payload_is_an_mqtt_sensor_as_home_assistant_documents_it(task):
    cfg = ModelConfig(
        name="room",
        inputs=2,
        task=task,
        classes=3 if task == "multiclass" else None,
        sources=[{"topic": "dev/+", "key": "topic:1"}],
    )
    state_topic = Names("room").topic("state/kitchen 1")
    doc = sensor_config(cfg, "kitchen 1", state_topic, expire_after_s=600)
    assert HA_SENSOR_REQUIRED <= set(doc) <= HA_SENSOR_KEYS, set(doc) - HA_SENSOR_KEYS
    assert "platform" not in doc, "only for device-based discovery"
    assert set(doc["device"]) <= HA_DEVICE_KEYS
    assert doc["device"]["identifiers"] and all(
        type(i) is str for i in doc["device"]["identifiers"]
    )
    assert doc["unique_id"] == doc["object_id"], "unique_id is required with a device"
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", doc["object_id"]), "a discovery topic level"
    assert doc["object_id"].startswith("streamlearn_room_")
    assert doc["state_topic"] == state_topic and doc["qos"] in (0, 1, 2)
    assert doc["json_attributes_topic"] == state_topic
    assert type(doc["expire_after"]) is int and doc["expire_after"] > 0
    for key in ("value_template", "json_attributes_template"):
        assert TEMPLATE.match(doc[key]), doc[key]
    if "state_class" in doc:
        assert doc["state_class"] in HA_STATE_CLASSES
    assert json.loads(json.dumps(doc)) == doc, "a JSON object"
    topic = config_topic("homeassistant", doc["object_id"])
    assert re.fullmatch(r"homeassistant/sensor/[a-zA-Z0-9_-]+/config", topic)


def test_object_ids_stay_apart_when_keys_differ_only_in_unsafe_characters():
    ids = {object_id("m", k) for k in ("a b", "a_b", "a.b", "a/b")}
    assert len(ids) == 4
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]+", i) for i in ids)


def test_the_handler_routes_readings_states_and_requests_and_clears_with_its_own_client():
    """paho's callback gets the client itself: a retained state past the bound may come
    before `connect` has returned the client that the constructor's `publish` closes over."""
    cfg = model(every_s=0, max_devices=1)
    names = Names(cfg.name)

    def unconnected(*_: object) -> None:
        raise AssertionError("the client is not known yet")

    s = States(cfg, names, unconnected, Index(1))
    requests: list[str] = []
    on_message = s.handler(lambda _c, _u, msg: requests.append(msg.topic))
    client = Broker()
    for key in ("old-1", "old-2"):  # past the bound of keys waiting to be indexed
        msg = paho.MQTTMessage(topic=names.topic(f"state/{key}").encode())
        msg.payload, msg.retain = json.dumps({"y": 1, "at": int(key[-1])}).encode(), True
        on_message(client, None, msg)
    assert client.sent == [(names.topic("state/old-1"), b"")]
    reading_msg = paho.MQTTMessage(topic=b"zigbee2mqtt/kitchen")
    reading_msg.payload = b'{"temperature": 1, "humidity": 2}'
    request = paho.MQTTMessage(topic=names.topic("predict/kitchen").encode())
    request.payload = b"{}"
    on_message(client, None, reading_msg)
    on_message(client, None, request)
    assert requests == [names.topic("predict/kitchen")]
    assert len(s.devices) == 1 and (names.topic("state/old-1"), b"") in client.sent
