"""Assembly's pure parts: its config, a message read as a reading, a sample formed from
held values (stale ones missing). No servers: `tests/integration/test_assembly.py` holds
them in Redis."""

from __future__ import annotations

import math

import numpy as np
import pytest
import redis

from streamlearn.config import ModelConfig
from streamlearn.contract.names import Names, assembled_id
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.records import Parsed
from streamlearn.errors import ConfigError
from streamlearn.ingest.assembly import SITE, Assembly
from streamlearn.ingest.inbox import Delivery
from streamlearn.store.held import Held, HeldStore, Reading, label_digest

SOURCES = [
    {"topic": "homeassistant/+/+/state", "field": "topic:2"},
    {"topic": "zigbee/+/set", "key": "topic:1"},
]


def room(**more: object) -> ModelConfig:
    return ModelConfig(
        name="room",
        inputs=["temp", "humidity", "door"],
        target="occupied",
        task="binary",
        sources=SOURCES,
        assembly={"max_age_s": 60, "max_age_s_of": {"door": 3600}},
        **more,
    )


def assembly(model: ModelConfig | None = None, now: float = 1000.0) -> Assembly:
    parser = PayloadParser(model or room())
    return Assembly(parser, HeldStore(redis.Redis(), Names("room")), clock=lambda: now)


def message(topic: str, body: bytes) -> Delivery:
    return Delivery(0, None, 1, 1, topic, body)  # type: ignore[arg-type]


def read(a: Assembly, topic: str, body: bytes, sender: str | None = None) -> Reading | Parsed:
    source = next((s for s in a.model.sources if _matches(s.topic, topic)), None)
    return a.read(message(topic, body), sender, source)


def _matches(pattern: str, topic: str) -> bool:
    from paho.mqtt.client import topic_matches_sub

    return topic_matches_sub(pattern, topic)


# -- config -------------------------------------------------------------------------------


def test_assembly_needs_named_inputs_and_limits_named_after_them():
    assert room().assembly is not None and room().assembly.max_age("door") == 3600
    with pytest.raises((ValueError, ConfigError), match="assembly: only for named inputs"):
        ModelConfig(name="m", inputs=2, assembly={})
    with pytest.raises((ValueError, ConfigError), match="'window' is not an input"):
        ModelConfig(name="m", inputs=["a"], assembly={"max_age_s_of": {"window": 5}})
    with pytest.raises((ValueError, ConfigError), match="every_s"):
        ModelConfig(name="m", inputs=["a"], assembly={"every_s": 0})


# -- readings -----------------------------------------------------------------------------


def test_statestream_plain_values_are_readings_of_the_site_key():
    a = assembly()
    temp = read(a, "homeassistant/sensor/temp/state", b"21.4")
    assert temp == Reading(SITE, "homeassistant/sensor/temp/state", {0: 21.4})
    gone = read(a, "homeassistant/sensor/humidity/state", b"unavailable")
    assert isinstance(gone, Reading) and math.isnan(gone.values[1])
    door = read(a, "homeassistant/binary_sensor/door/state", b"on")
    assert isinstance(door, Reading) and door.values == {2: 1.0} and door.label is None


def test_a_label_on_its_own_topic_carries_a_digest_of_its_message():
    a = assembly()
    topic = "homeassistant/binary_sensor/occupied/state"
    label = read(a, topic, b"off")
    assert isinstance(label, Reading) and label.values == {}
    assert label.target == "0.0" and label.label == label_digest(topic, b"off")
    assert label_digest(topic, b"on") != label.label != label_digest("other", b"off")


def test_a_device_key_comes_from_its_topic_level_and_may_not_be_renamed():
    a = assembly()
    own = read(a, "zigbee/dev-1/set", b'{"temp": 20, "occupied": true}')
    assert isinstance(own, Reading) and own.key == "dev-1" and own.target == "1.0"
    other = read(a, "zigbee/dev-1/set", b'{"key": "dev-2", "temp": 20}')
    assert isinstance(other, Parsed) and other.rejections[0].kind == "wrong_key"
    client = read(a, "streamlearn/room/samples/dev-3", b'{"temp": 1}', sender="dev-3")
    assert isinstance(client, Reading) and client.key == "dev-3"


def test_a_bad_reading_is_a_dead_letter_with_its_kind():
    a = assembly()
    for body, kind in [
        (b'{"temp": "warm"}', "wrong_type"),
        (b'{"temp": 1, "occupied": 2}', "bad_target"),
        (b"[1, 2", "invalid_json"),
    ]:
        got = read(a, "zigbee/dev-1/set", body)
        assert isinstance(got, Parsed) and got.rejections[0].kind == kind, body


# -- formation ----------------------------------------------------------------------------


def held(now: float, **ages: tuple[float, str]) -> Held:
    index = {"temp": "0", "humidity": "1", "door": "2", "occupied": "y"}
    return Held({index[name]: (now - age, text) for name, (age, text) in ages.items()})


def test_a_sample_takes_the_fresh_values_and_counts_the_stale_as_missing():
    a = assembly(now=1000.0)
    state = held(1000.0, temp=(10, "21.5"), humidity=(61, "40.0"), door=(3000, "1.0"))
    parsed = a.form("k", state, 1.0, "k|1|abc", 990.0, 1000.0, b"")
    assert parsed.samples is not None and parsed.observations is None
    x = parsed.samples.x[0]
    assert x[0] == 21.5 and math.isnan(x[1]) and x[2] == 1.0
    assert parsed.samples.ids == (assembled_id("k|1|abc"),)
    assert parsed.fields is not None and parsed.fields.missing == {"humidity": 1}


def test_more_missing_than_max_missing_is_a_missing_field_dead_letter():
    a = assembly(now=1000.0)
    state = held(1000.0, temp=(10, "nan"), humidity=(61, "40.0"), door=(1, "0.0"))
    parsed = a.form("k", state, 0.0, "k|2|abc", 990.0, 1000.0, b"off")
    assert parsed.samples is None
    [letter] = parsed.rejections
    assert letter.kind == "missing_field" and letter.payload == b"off"
    assert "2 of 3 inputs" in letter.reason


def test_a_window_models_sample_is_a_step_at_the_labels_first_arrival():
    model = room(window=4, architecture="lstm")
    a = assembly(model, now=1000.0)
    state = held(1000.0, temp=(1, "1.0"), humidity=(1, "2.0"), door=(1, "0.0"))
    parsed = a.form("dev-1", state, 1.0, "dev-1|1|abc", 990.0, 1000.0, b"")
    steps = parsed.observations
    assert steps is not None and parsed.samples is None
    assert steps.keys == ("dev-1",) and steps.seq.tolist() == [990.0]
    np.testing.assert_array_equal(steps.x, [[1.0, 2.0, 0.0]])


def test_a_held_value_past_its_age_is_none():
    state = Held({"0": (100.0, "1.5")})
    assert state.value("0", 150.0, 60) == "1.5"
    assert state.value("0", 161.0, 60) is None and state.value("1", 150.0, 60) is None
