"""Samples on the devices' own topics (`[[sources]]`), named or positional: judged like the
samples topic, stored once, learned; a topic too short for its device key is a dead letter."""

from __future__ import annotations

import json

from streamlearn.contract.names import Names
from tests.conftest import eventually, plain_paho, retained

TOML = """
[models.s]
inputs = ["t", "v", "r"]
target = "failed"
task = "binary"

[[models.s.sources]]
topic = "plant/+/telemetry"

[[models.s.sources]]
topic = "site/#"
key = "topic:2"
"""


def stored(redis, names: Names) -> int:
    """Samples ever appended (the learner may have trimmed the stream since)."""
    return int(redis.get(names.ingest_count_key) or 0)


def test_samples_on_a_source_topic_are_learned(start_role, redis, settings):
    names = Names("s", settings.topic_prefix, settings.key_prefix)
    start_role("ingest", TOML)
    start_role("learner", TOML)
    device = plain_paho(settings)
    try:
        for i in range(40):  # as the devices send them: named, or positional
            named = {"t": i, "v": i / 2, "r": -i, "failed": i % 2, "id": f"s{i}"}
            body = named if i % 2 else {"x": [i, i / 2, -i], "y": i % 2, "id": f"s{i}"}
            topic = f"plant/d{i % 4}/telemetry"
            device.publish(topic, json.dumps(body), qos=1).wait_for_publish(10)
        # a repeat is a duplicate, a short topic a dead letter: both acknowledged
        device.publish("plant/d0/telemetry", json.dumps(body), qos=1).wait_for_publish(10)
        device.publish("site/a", json.dumps(body), qos=1).wait_for_publish(10)
    finally:
        device.disconnect()
    eventually(lambda: redis.xlen(names.deadletter_key) >= 1, 30, "the dead letter")
    [(_, letter)] = redis.xrange(names.deadletter_key)
    assert letter[b"source"] == b"site/a"
    assert b"no level 2" in letter[b"reason"]
    assert stored(redis, names) == 40
    status = eventually(
        lambda: (s := retained(settings, names.status_topic)) and s["samples_seen"] >= 40 and s,
        60,
        "the learner trained on the source's samples",
    )
    assert status["samples_seen"] == 40


NAMED_TOML = """
[models.m]
inputs = ["temperature", "vibration", "rpm", "machine_type"]
target = "failed"
task = "binary"
categorical = { machine_type = ["press", "lathe"] }

[[models.m.sources]]
topic = "plant/+/telemetry"
"""


def test_field_counts_of_every_ingest_process_reach_the_status(start_role, redis, settings):
    names = Names("m", settings.topic_prefix, settings.key_prefix)
    start_role("ingest", NAMED_TOML, instance="0")  # two processes: the totals are summed
    start_role("ingest", NAMED_TOML, instance="1")
    start_role("learner", NAMED_TOML)
    device = plain_paho(settings)
    try:
        for i in range(30):  # two fields the model does not use in each
            body = {"temperature": 20 + i, "vibration": i / 10, "rpm": 1500, "failed": i % 2}
            body |= {"machine_type": "mill" if i % 6 == 0 else "press", "id": f"m{i}"}
            body |= {"rssi": -60, "fw": "1.2"}
            if i % 5 == 0:
                del body["vibration"]  # missing: i = 0, 5, ..., 25
            elif i % 5 == 1:
                body["vibration"] = None  # null: i = 1, 6, ..., 26
            device.publish(f"plant/d{i % 3}/telemetry", json.dumps(body), qos=1)
        # telemetry without a label: not a sample, one field the model does not use
        body = {"temperature": 20, "vibration": 0.1, "rpm": 1500, "machine_type": "lathe"}
        body["rssi"] = -60
        for _ in range(4):
            device.publish("plant/d9/telemetry", json.dumps(body), qos=1).wait_for_publish(10)
    finally:
        device.disconnect()
    want = {
        "extra": 30 * 2 + 4,
        "unlabeled": 4,
        "missing": {"vibration": 12},
        "unseen": {"machine_type": 5},  # "mill": i = 0, 6, 12, 18, 24
    }
    status = eventually(
        lambda: (
            (s := retained(settings, names.status_topic))
            and s.get("fields") == want
            and s["samples_seen"] >= 30
            and s
        ),
        60,
        "the field counts and the samples in the learner's status",
    )
    assert stored(redis, names) == 30
    assert status["samples_seen"] == 30
    assert redis.xlen(names.deadletter_key) == 0
