"""Ingest against real mosquitto and Redis: good samples flow, bad ones are dead-lettered."""

from __future__ import annotations

import json

import numpy as np

from streamlearn.names import Names
from streamlearn.queue import unpack
from tests.conftest import eventually, plain_paho

TOML = """
[models.m]
inputs = 3
task = "binary"

[models.m.ingest]
max_payload_bytes = 4096
"""


def test_malformed_payloads_are_dead_lettered_and_good_samples_flow(start_role, redis, settings):
    names = Names("m", settings.topic_prefix, settings.key_prefix)
    start_role("ingest", TOML)
    good_rows: list[list[float]] = []

    def good(i: int) -> bytes:
        row = [i, i + 0.5, -i]
        good_rows.append(row)
        return json.dumps({"x": row, "y": i % 2, "id": f"g{i}"}).encode()

    bad = {
        b"{not json": "invalid JSON",
        b'{"x": [1, 2], "y": 1}': "shape [3]",
        b'{"x": [1, NaN, 3], "y": 0}': "finite",
        b'{"x": [1, "2", 3], "y": 0}': "valid number",
        b'{"x": [1, 2, 3], "y": "1"}': "valid number",
        b'{"x": [1, 2, 3], "y": 1, "extra": true}': "Extra inputs",
        json.dumps(
            {"x": [1.0] * 3, "y": 1, "id": "a" * 5000}
        ).encode(): "exceeds max_payload_bytes",
        b'{"x": [1, 2, 3], "y": 7}': "binary",
        b"[1, 2, 3]": "JSON object",
    }
    stream: list[bytes] = []
    i = 0
    for payload in bad:
        stream += [good(i), payload, good(i + 1)]
        i += 2
    # a list with one bad item among good ones, and a good columnar message
    rows = [[100.0, 1.0, 2.0], [101.0, 1.0, 2.0]]
    stream.append(
        json.dumps(
            {"samples": [{"x": rows[0], "y": 1}, {"x": [1, 2], "y": 0}, {"x": rows[1], "y": 0}]}
        ).encode()
    )
    good_rows += rows
    cols = [[200.0, 0.0, 0.0], [201.0, 0.0, 0.0], [202.0, 0.0, 0.0]]
    stream.append(json.dumps({"x": cols, "y": [0, 1, 0], "ids": ["c0", "c1", "c2"]}).encode())
    good_rows += cols

    device = plain_paho(settings)
    for payload in stream:
        device.publish(names.samples_topic, payload, qos=1).wait_for_publish(10)
    device.disconnect()

    expected_dead = len(bad) + 1
    eventually(lambda: redis.xlen(names.deadletter_key) >= expected_dead, 30, "dead letters")
    eventually(
        lambda: sum(int(f[b"n"]) for _, f in redis.xrange(names.samples_key)) >= len(good_rows),
        30,
        "good samples in the stream",
    )

    entries = [unpack(f, (3,)) for _, f in redis.xrange(names.samples_key)]
    got = np.concatenate([e.x for e in entries])
    np.testing.assert_array_equal(got, np.array(good_rows, np.float32))
    assert entries[-1].ids == ("c0", "c1", "c2")
    assert len(entries) == 2 * len(bad) + 2, "one stream entry per accepted message"

    dead = [{k.decode(): v for k, v in f.items()} for _, f in redis.xrange(names.deadletter_key)]
    assert len(dead) == expected_dead
    for (payload, why), letter in zip(bad.items(), dead, strict=False):
        assert why in letter["reason"].decode(), (payload, letter["reason"])
        assert letter["payload"] == payload[:1024]
        assert letter["source"].decode() == names.samples_topic
    assert dead[-1]["reason"].decode().startswith("samples.1: ")
