"""The examples of devices' own topics (examples/tasmota.toml, examples/zigbee2mqtt.toml):
each loads, and what such devices publish, as they publish it, is read into the x the
model expects; through a running service, a Zigbee2MQTT-like sensor's readings are learned
from their source topic, and a label that comes later joins the request it answers."""

from __future__ import annotations

import json
import random

import numpy as np

from streamlearn import Client, Prediction, PredictionError
from streamlearn.config import ModelConfig, load_config
from streamlearn.contract.names import Names, owned
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.sparkplug.proto import sparkplug_b_pb2 as pb
from streamlearn.store.entries import unpack
from streamlearn.store.fields import FieldTotals
from streamlearn.store.stream import SampleStream
from tests.conftest import ROOT, eventually, plain_paho, retained, trained

EXAMPLES = ROOT / "examples"


def example(name: str) -> ModelConfig:
    return load_config(EXAMPLES / name).model(None)


# -- what the devices publish, as they publish it -----------------------------------------


def tasmota_sensor(power: object, voltage: float, current: object, factor: object) -> bytes:
    """A Tasmota plug's tele/<device>/SENSOR message (firmware 13.x, energy monitoring);
    a device of two channels writes lists for Power, Current and Factor."""
    return json.dumps(
        {
            "Time": "2026-11-25T04:00:00",
            "ENERGY": {
                "TotalStartTime": "2026-01-01T00:00:00",
                "Total": 12.345,
                "Yesterday": 0.512,
                "Today": 0.201,
                "Period": 1,
                "Power": power,
                "ApparentPower": 98,
                "ReactivePower": 49,
                "Factor": factor,
                "Voltage": voltage,
                "Current": current,
            },
        }
    ).encode()


def zigbee_state(
    temperature: float, humidity: float, battery: int, occupancy: bool, **more: object
) -> bytes:
    """A Zigbee2MQTT device's zigbee2mqtt/<friendly name> message (a presence sensor that
    measures the air too: occupancy is a JSON boolean)."""
    doc = {
        "battery": battery,
        "humidity": humidity,
        "linkquality": 132,
        "occupancy": occupancy,
        "temperature": temperature,
        "voltage": 3000,
    }
    return json.dumps({**doc, **more}).encode()


# -- the configs and their payloads ---------------------------------------------------------


def test_the_examples_load_with_their_devices_topics():
    plug = example("tasmota.toml")
    assert plug.fields == ("ENERGY.Power.0", "ENERGY.Voltage.0", "ENERGY.Current.0")
    assert plug.target == "ENERGY.Factor.0" and plug.task == "regression"
    assert [(s.topic, s.key_level) for s in plug.sources] == [("tele/+/SENSOR", 1)]
    room = example("zigbee2mqtt.toml")
    assert room.fields == ("temperature", "humidity", "battery", "occupancy")
    assert room.target == "occupied" and room.task == "binary"
    assert [s.topic for s in room.sources] == ["zigbee2mqtt/+"]


def test_a_tasmota_plugs_telemetry_parses_into_x_one_channel_or_two():
    parser = PayloadParser(example("tasmota.toml"))
    for raw in (
        tasmota_sensor(85, 231, 0.424, 0.87),
        tasmota_sensor([85, 12], 231, [0.424, 0.1], [0.87, 0.5]),
    ):
        parsed = parser.parse_message(raw, key="plug-1")
        assert parsed.rejections == [], parsed.rejections
        assert parsed.samples is not None
        np.testing.assert_allclose(parsed.samples.x, [[85, 231, 0.424]], rtol=1e-6)
        np.testing.assert_allclose(parsed.samples.y, [0.87], rtol=1e-6)


def test_a_zigbee2mqtt_sensors_state_parses_into_x_and_a_request_keeps_its_id():
    parser = PayloadParser(example("zigbee2mqtt.toml"))
    parsed = parser.parse_message(zigbee_state(21.4, 48.5, 97, True, occupied=True))
    assert parsed.rejections == [], parsed.rejections
    np.testing.assert_allclose(parsed.samples.x, [[21.4, 48.5, 97, 1]], rtol=1e-6)
    assert parsed.samples.y.tolist() == [1.0]
    request = parser.parse_request(
        {"temperature": 21.4, "humidity": 48.5, "battery": 97, "occupancy": False, "id": "k-1"}
    )
    np.testing.assert_allclose(request.x, [[21.4, 48.5, 97, 0]], rtol=1e-6)
    assert request.id == "k-1"


def test_a_zigbee2mqtt_room_learns_from_its_topic_and_from_labels_that_come_later(
    start_role, settings, redis
):
    toml = (EXAMPLES / "zigbee2mqtt.toml").read_text()
    # as it ships, with one padded batch size: one trace before the learner is ready
    toml += "\n[models.room.learner]\nbuckets = [256]\n"
    for role in ("ingest", "learner", "actor"):
        start_role(role, toml)
    names = Names("room", settings.topic_prefix, settings.key_prefix)
    rng = random.Random(4)
    device = plain_paho(settings)
    try:  # occupied rooms are warm and humid
        for i in range(300):
            occupied = i % 2
            t = 19 + 4 * occupied + rng.uniform(-1, 1)
            h = 40 + 15 * occupied + rng.uniform(-3, 3)
            moving = rng.random() < (0.7 if occupied else 0.1)  # the radar's own guess
            raw = zigbee_state(round(t, 1), round(h, 1), 97, moving, occupied=occupied)
            device.publish(f"zigbee2mqtt/room-{i % 3}", raw, qos=1).wait_for_publish(10)
    finally:
        device.loop_stop()
        device.disconnect()

    eventually(
        lambda: trained(settings, names) >= 300,
        90,
        "the learner trained on the sensors' own messages",
    )

    with Client(settings.mqtt, topic_prefix=settings.topic_prefix) as client:
        reading = {"temperature": 23.2, "humidity": 56.0, "battery": 97, "occupancy": True}
        tries = iter(range(1000))

        def answered() -> tuple[str, Prediction] | None:
            id = f"kitchen-{next(tries)}"
            try:
                return id, client.predict("room", reading, id=id, timeout=5)
            except PredictionError:
                return None  # no weights yet

        id, served = eventually(answered, 30, "a served prediction")
        assert served.model == "room" and 0.0 <= served.y <= 1.0
        # The actor kept the request's features before it replied: a label may follow at once.
        assert redis.exists(names.pending_key(owned(client.client_id, id)))
        client.label("room", id, 1)  # later, when the answer is known

    def joined() -> dict | None:
        status = retained(settings, names.status_topic) or {}
        figures = status.get("served") or {}
        return figures if figures.get("labels", 0) + (figures.get("unknown") or 0) >= 1 else None

    figures = eventually(joined, 30, "the label joined to the served request")
    assert figures["labels"] == 1 and figures.get("unknown", 0) == 0, figures
    eventually(lambda: trained(settings, names) >= 301, 30, "the joined label learned")


TWO_CHANNELS = """
[models.meter]
inputs = ["ENERGY.Power.0", "ENERGY.Power.1", "ENERGY.Voltage.0"]
target = "ENERGY.Factor.0"

[[models.meter.sources]]
topic = "tele/+/SENSOR"
key = "topic:1"
"""


def test_tasmota_arrays_through_the_broker_an_element_past_the_end_missing_a_word_refused(
    start_role, settings, redis
):
    start_role("ingest", TWO_CHANNELS)
    names = Names("meter", settings.topic_prefix, settings.key_prefix)
    device = plain_paho(settings)
    try:
        for raw in (
            tasmota_sensor([85, 12], 231, [0.4, 0.1], [0.87, 0.5]),  # two channels
            tasmota_sensor(85, 231, 0.4, 0.87),  # one: Power.1 is missing, counted
            tasmota_sensor([85, "n/a"], 231, [0.4, 0.1], [0.87, 0.5]),  # a word: wrong_type
        ):
            device.publish("tele/dual-1/SENSOR", raw, qos=1).wait_for_publish(10)
    finally:
        device.loop_stop()
        device.disconnect()
    totals = FieldTotals(redis, names)
    eventually(
        lambda: (totals.read() or {}).get("sources", {}).get("tele/+/SENSOR") == 3,
        30,
        "the three messages counted",
    )
    assert (totals.read() or {})["missing"] == {"ENERGY.Power.1": 1}
    assert SampleStream(redis, names, (3,)).backlog() == 2
    [(_, letter)] = redis.xrange(names.deadletter_key)
    assert letter[b"kind"] == b"wrong_type" and b"ENERGY.Power.1" in letter[b"reason"]


def test_a_home_assistant_statestream_through_the_broker_as_the_example_reads_it(
    start_role, settings, redis
):
    """examples/homeassistant.toml: one bare value per entity topic, retained, as Home
    Assistant publishes them; each change of the heat pump's power forms a sample of the
    home's held values (`unavailable`: missing; an entity the model does not use: counted;
    the echo of the service's own state entity: not even that)."""
    # statestream's base_topic is the user's: one of this test's own, so that no other
    # test's ingest of homeassistant/+/+/state (sharing the broker) reads its messages
    base = f"home-{random.randrange(10**9)}"
    toml = (EXAMPLES / "homeassistant.toml").read_text()
    assert 'topic = "homeassistant/+/+/state"' in toml
    start_role("ingest", toml.replace('"homeassistant/+/+/state"', f'"{base}/+/+/state"'))
    names = Names("home", settings.topic_prefix, settings.key_prefix)
    states = [
        ("sensor/outdoor_temperature", "7.5"),
        ("sensor/living_room_temperature", "20.1"),
        ("binary_sensor/living_room_window", "off"),
        ("climate/living_room", "heat"),
        ("sensor/phone_battery", "54"),  # not an input: ignored, counted
        ("sensor/streamlearn_home_-", "1105.2"),  # statestream's echo of our own state: ignored
        ("sensor/heat_pump_power", "1240"),  # the label: a sample
        ("sensor/living_room_temperature", "unavailable"),
        ("binary_sensor/living_room_window", "on"),
        ("sensor/heat_pump_power", "310"),  # a second sample, the room's value missing
    ]
    home = plain_paho(settings)
    try:
        for entity, state in states:
            topic = f"{base}/{entity}/state"
            home.publish(topic, state, qos=1, retain=True).wait_for_publish(10)
        totals = FieldTotals(redis, names)
        counted = f"{base}/+/+/state"  # each message's counts are written after its samples
        eventually(
            lambda: (totals.read() or {}).get("sources", {}).get(counted) == len(states),
            30,
            "every state counted",
        )
        assert SampleStream(redis, names, (4,)).backlog() == 2  # two samples assembled
        assert (totals.read() or {})["missing"] == {"living_room_temperature": 1}
        assert (totals.read() or {})["extra"] == 1
        assert redis.xlen(names.deadletter_key) == 0
    finally:  # the broker keeps no retained state of this test for the next
        for entity, _ in states:
            home.publish(f"homeassistant/{entity}/state", b"", qos=1, retain=True).wait_for_publish(
                10
            )
        home.loop_stop()
        home.disconnect()


DOORS = """
[models.doors]
inputs = ["contact", "tamper", "battery"]
target = "intrusion"
task = "binary"
categorical = { contact = ["true", "false"] }

[[models.doors.sources]]
topic = "zigbee2mqtt/doors/+"
"""


def test_zigbee2mqtt_booleans_through_the_broker_as_numbers_and_as_a_category(
    start_role, settings, redis
):
    """An Aqara door sensor's state as Zigbee2MQTT publishes it: `contact` (a category
    here) and `tamper` (a number) are JSON booleans."""
    start_role("ingest", DOORS)
    names = Names("doors", settings.topic_prefix, settings.key_prefix)
    device = plain_paho(settings)
    try:
        for contact, tamper, intrusion in ((False, False, 0), (True, True, 1)):
            state = {"battery": 91, "contact": contact, "tamper": tamper, "linkquality": 54}
            raw = json.dumps({**state, "voltage": 2985, "intrusion": intrusion})
            device.publish("zigbee2mqtt/doors/back", raw, qos=1).wait_for_publish(10)
    finally:
        device.loop_stop()
        device.disconnect()
    eventually(lambda: SampleStream(redis, names, (3,)).backlog() == 2, 30, "two samples")
    rows = [unpack(f, (3,)) for _, f in redis.xrange(names.samples_key)]
    x = np.concatenate([r.x for r in rows])
    assert x.tolist() == [[1.0, 0.0, 91.0], [0.0, 1.0, 91.0]]  # "false" is index 1
    assert np.concatenate([r.y for r in rows]).tolist() == [0.0, 1.0]
    assert redis.xlen(names.deadletter_key) == 0


def test_a_sparkplug_plant_through_the_broker_as_the_example_reads_it(start_role, settings, redis):
    """examples/sparkplug.toml: an edge node's NBIRTH and a press's DBIRTH (every metric,
    with aliases), then DDATA of only what changed, by alias, as Tahu publishes them; each
    report of a part's quality in data forms a sample of the press's held metrics."""
    # the group is the plant's: one of this test's own, so that no other test's ingest
    # of spBv1.0/... (sharing the broker) reads its messages
    group = f"Plant {random.randrange(10**9)}"
    toml = (EXAMPLES / "sparkplug.toml").read_text()
    assert 'topic = "spBv1.0/Plant 1/#"' in toml
    toml = toml.replace('"spBv1.0/Plant 1/#"', f'"spBv1.0/{group}/#"')
    start_role("ingest", toml.replace('primary_host = "streamlearn"', f'primary_host = "{group}"'))
    names = Names("press", settings.topic_prefix, settings.key_prefix)
    FLOAT, INT32, STRING, BOOLEAN, INT64 = 9, 3, 12, 11, 4
    metrics = [  # name, alias, type, value at birth
        ("Hydraulics/Pressure", 1, FLOAT, 182.0),
        ("Hydraulics/Oil Temperature", 2, FLOAT, 45.5),
        ("Motor/RPM", 3, INT32, 1450),
        ("Mode", 4, STRING, "auto"),
        ("Quality/Reject", 5, BOOLEAN, False),
        ("Properties/Hardware Make", 6, STRING, "Acme"),  # not an input: dropped
    ]
    field = {FLOAT: "float_value", INT32: "int_value", STRING: "string_value"}
    field[BOOLEAN] = "boolean_value"

    def payload(seq: int, values: list[tuple[str | None, int, int, object]]) -> bytes:
        p = pb.Payload(timestamp=1_700_000_000_000 + seq, seq=seq)
        for name, alias, datatype, value in values:
            m = p.metrics.add(alias=alias, datatype=datatype, timestamp=p.timestamp)
            if name is not None:
                m.name = name
            setattr(m, field[datatype], value)
        return p.SerializeToString()

    birth = pb.Payload(timestamp=1_700_000_000_000, seq=0)
    birth.metrics.add(name="bdSeq", datatype=INT64, long_value=0)
    birth.metrics.add(name="Node Control/Rebirth", alias=0, datatype=BOOLEAN, boolean_value=False)
    edge = plain_paho(settings)
    at = f"spBv1.0/{group}/{{}}/Line 1"
    try:
        for topic, body in [
            (at.format("NBIRTH"), birth.SerializeToString()),
            (at.format("DBIRTH") + "/Press 2", payload(1, metrics)),  # held: no sample
            (at.format("DDATA") + "/Press 2", payload(2, [(None, 1, FLOAT, 190.5)])),
            (at.format("DDATA") + "/Press 2", payload(3, [(None, 5, BOOLEAN, True)])),
            (at.format("DDATA") + "/Press 2", payload(4, [(None, 2, FLOAT, 47.0)])),
            (at.format("DDATA") + "/Press 2", payload(5, [(None, 5, BOOLEAN, False)])),
        ]:
            edge.publish(topic, body, qos=0).wait_for_publish(10)  # as Sparkplug publishes
    finally:
        edge.loop_stop()
        edge.disconnect()
    eventually(lambda: SampleStream(redis, names, (4,)).backlog() == 2, 30, "two samples")
    rows = [unpack(f, (4,)) for _, f in redis.xrange(names.samples_key)]
    x = np.concatenate([r.x for r in rows])
    assert x.tolist() == [[190.5, 45.5, 1450.0, 0.0], [190.5, 47.0, 1450.0, 0.0]]
    assert np.concatenate([r.y for r in rows]).tolist() == [1.0, 0.0]
    assert redis.xlen(names.deadletter_key) == 0
    state = retained(settings, f"spBv1.0/STATE/{group}")
    assert state is not None and state["online"] is True
