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
