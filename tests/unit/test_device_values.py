"""Values as devices send them (contract §2.1.1): booleans, arrays reached by index, plain
bodies one field per topic, device timestamps as a window's order. The payloads are the
device families' own; no server."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from streamlearn.config import ModelConfig
from streamlearn.config.inputs import SourceConfig
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.plain import plain_object
from streamlearn.contract.records import FieldCounts
from streamlearn.errors import PayloadError
from streamlearn.online.model import OnlineModel

# Zigbee2MQTT: an Aqara motion sensor and a door contact, as they publish.
ROOM = ModelConfig(
    name="room",
    inputs=["illuminance", "occupancy", "contact", "mode"],
    target="occupied",
    task="binary",
    categorical={"mode": ["true", "false"]},
)
MOTION = {"battery": 100, "illuminance": 18, "occupancy": True, "linkquality": 90, "voltage": 3005}
# Tasmota: a two-channel energy meter (one Power per phase).
PLUG = ModelConfig(
    name="plug",
    inputs=["ENERGY.Power.0", "ENERGY.Power.1", "ENERGY.Voltage"],
    target="ENERGY.Factor",
)


def tasmota(power: object) -> bytes:
    doc = {"Time": "2026-11-25T04:00:00", "ENERGY": {"Power": power, "Voltage": 231}}
    doc["ENERGY"]["Factor"] = 0.9  # type: ignore[index]
    return json.dumps(doc).encode()


def test_a_boolean_is_one_or_zero_and_as_a_category_true_or_false():
    parsed = PayloadParser(ROOM).parse_message(
        json.dumps({**MOTION, "contact": False, "mode": True, "occupied": True}).encode()
    )
    assert parsed.rejections == []
    assert parsed.samples.x.tolist() == [[18.0, 1.0, 0.0, 0.0]]
    assert parsed.samples.y.tolist() == [1.0]


def test_an_index_reads_an_arrays_element_and_past_its_end_is_missing_and_counted():
    parser = PayloadParser(PLUG)
    parsed = parser.parse_message(tasmota([85, 12]))
    assert parsed.samples.x.tolist() == [[85.0, 12.0, 231.0]]
    short = parser.parse_message(tasmota([85]))
    assert short.rejections == [] and math.isnan(short.samples.x[0, 1])
    assert dict(short.fields.missing) == {"ENERGY.Power.1": 1}
    [bad] = parser.parse_message(tasmota([85, "n/a"])).rejections
    assert bad.kind == "wrong_type" and "ENERGY.Power.1" in bad.reason


HA = ModelConfig(
    name="kitchen",
    inputs=["kitchen_temp", "window", "hvac"],
    target="comfort",
    categorical={"hvac": ["heat", "cool", "off"]},
    max_missing=1.0,
    sources=[{"topic": "homeassistant/+/+/state", "field": "topic:2"}],
)


@pytest.mark.parametrize(
    ("topic", "body", "value"),
    [
        ("homeassistant/sensor/kitchen_temp/state", b"21.4", 21.4),
        ("homeassistant/sensor/kitchen_temp/state", b'"21.4"', 21.4),
        ("homeassistant/binary_sensor/window/state", b"on", 1.0),
        ("homeassistant/binary_sensor/window/state", b"off", 0.0),
        ("homeassistant/sensor/kitchen_temp/state", b"unavailable", None),
        ("homeassistant/sensor/kitchen_temp/state", b"unknown", None),
        ("homeassistant/climate/hvac/state", b"cool", 1.0),
    ],
)
def test_a_plain_body_is_the_field_its_topic_names(topic, body, value):
    parser = PayloadParser(HA)
    field = HA.sources[0].field_of(topic)
    doc = parser.reading(body, field)
    values, target = parser._named.fields.reading(doc, counts := _counts())  # type: ignore[union-attr]
    assert target is None and list(values) == [field]
    got = values[field]
    assert math.isnan(got) if value is None else got == value
    assert counts.extra == 0


def test_a_plain_bodys_label_on_its_own_topic_and_bad_bodies_are_dead_letters():
    parser = PayloadParser(HA)
    assert parser.reading(b"0.7", "comfort") == {"comfort": 0.7}
    for body, kind in [
        (b"warm", "wrong_type"),
        (b"[1, 2]", "wrong_type"),
        (b"\xff", "invalid_json"),
    ]:
        [bad] = parser.parse_message(body, field="kitchen_temp").rejections
        assert bad.kind == kind, body
    [long] = parser.parse_message(b"1" * 70_000, field="kitchen_temp").rejections
    assert long.kind == "bad_string"  # not a number: 70,000 digits is text
    over = b"1" * (HA.ingest.max_payload_bytes + 1)
    [big] = parser.parse_message(over, field="kitchen_temp").rejections
    assert big.kind == "oversize"


def test_a_source_field_is_a_topic_level_or_an_input_and_is_checked_at_start():
    assert SourceConfig(topic="z2m/+/occupancy", field="occupancy").field_of("z2m/a/occupancy") == (
        "occupancy"
    )
    with pytest.raises(ValueError, match="sources.field: 'nope'"):
        HA.model_copy(update={}).model_validate(
            {**HA.model_dump(), "sources": [{"topic": "a/+", "field": "nope"}]}
        )
    with pytest.raises(ValueError, match="only for named inputs"):
        ModelConfig(name="p", inputs=2, sources=[{"topic": "a/+", "field": "topic:1"}])


WINDOWED = ModelConfig(
    name="plugs",
    inputs=["ENERGY.Power.0", "ENERGY.Voltage"],
    target="ENERGY.Factor",
    architecture="conv1d",
    window=4,
    seq_field="Time",
)


def test_a_device_timestamp_orders_a_window_and_a_bad_one_is_a_dead_letter():
    parser = PayloadParser(WINDOWED)
    parsed = parser.parse_message(tasmota([85, 12]), key="plug-1", at=5.0)
    assert parsed.observations.keys == ("plug-1",)
    assert parsed.observations.seq.tolist() == [1795579200.0]  # 2026-11-25T04:00:00Z
    doc = json.loads(tasmota([85]))
    doc["Time"] = "yesterday"
    [bad] = parser.parse_message(json.dumps(doc).encode(), key="plug-1").rejections
    assert bad.kind == "wrong_type" and "ISO 8601" in bad.reason
    with pytest.raises(ValueError, match="seq_field: only for a model with a window"):
        ModelConfig(name="p", inputs=["a"], seq_field="Time")


def test_the_library_reads_booleans_and_indexes_as_the_service_does():
    row = {"ENERGY": {"Power": [85, 12], "Voltage": True}}
    named = OnlineModel._named  # the library's reading of a dict, without building a model
    assert named(SimpleNamespace(spec=PLUG.spec), row) == [85.0, 12.0, 1.0]  # type: ignore[arg-type]


def _counts() -> FieldCounts:
    return FieldCounts()


def test_a_plain_value_longer_than_a_devices_is_refused():
    with pytest.raises(PayloadError, match="at most 256"):
        plain_object(b"x" * 300, "t", 10_000)
