"""Ingest against real mosquitto and Redis: good samples flow once, bad ones are dead-lettered,
and a learner that falls behind holds samples at the broker."""

from __future__ import annotations

import json
import time
from collections import Counter

import numpy as np

from streamlearn.contract.names import Names, sample_id
from streamlearn.contract.records import Rejection, Samples
from streamlearn.store.appends import CHUNK_SAMPLES
from streamlearn.store.stream import SampleStream, unpack
from tests.conftest import eventually, plain_paho
from tests.deployed import redis_as

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
    ids = [i for e in entries for i in (e.ids or (None,) * len(e.y))]
    assert ids[-3:] == ["c0", "c1", "c2"]
    assert len(entries) <= 2 * len(bad) + 2, "at most an entry per accepted message"

    dead = [{k.decode(): v for k, v in f.items()} for _, f in redis.xrange(names.deadletter_key)]
    assert len(dead) == expected_dead
    for (payload, why), letter in zip(bad.items(), dead, strict=False):
        assert why in letter["reason"].decode(), (payload, letter["reason"])
        assert letter["payload"] == payload[:1024]
        assert letter["source"].decode() == names.samples_topic
    assert dead[-1]["reason"].decode().startswith("samples.1: ")


# -- de-duplication ---------------------------------------------------------------------------


def entries(redis, names: Names, shape: tuple[int, ...] = (3,)) -> list:
    return [unpack(f, shape) for _, f in redis.xrange(names.samples_key)]


def ids_in_stream(redis, names: Names) -> Counter:
    return Counter(i for e in entries(redis, names) for i in e.ids or () if i is not None)


def test_a_message_sent_again_adds_its_samples_once(start_role, redis, settings):
    """A redelivery or a device's retransmit carries ids already in the stream: dropped."""
    names = Names("m", settings.topic_prefix, settings.key_prefix)
    start_role("ingest", TOML)
    singles = [{"x": [i, 0, 0], "y": 1, "id": f"s{i}"} for i in range(20)]
    batch = {"x": [[100, 0, 0], [101, 0, 0]], "y": [0, 1], "ids": ["c0", "c1"]}
    overlap = {
        "samples": [
            {"x": [5, 0, 0], "y": 1, "id": "s5"},
            {"x": [7, 7, 7], "y": 0, "id": "new"},
            {"x": [8, 8, 8], "y": 0},
        ]
    }
    device = plain_paho(settings)
    for doc in [*singles, batch, *singles, batch, overlap]:
        device.publish(names.samples_topic, json.dumps(doc), qos=1).wait_for_publish(10)
    device.disconnect()

    eventually(lambda: "new" in ids_in_stream(redis, names), 30, "the last message")
    got = entries(redis, names)
    assert ids_in_stream(redis, names) == Counter(
        [f"s{i}" for i in range(20)] + ["c0", "c1", "new"]
    )
    assert sum(len(e.y) for e in got) == 24, "each new sample once, and the one without id"
    last = got[-1]  # the last message's samples end the last entry (it may hold a run)
    np.testing.assert_array_equal(last.x[-2:], [[7, 7, 7], [8, 8, 8]])
    assert last.ids[-2:] == ("new", None), "a sample without id is never dropped"


def test_the_first_message_on_a_fresh_redis_is_stored_at_once(start_role, redis, settings):
    """A fresh (or restarted) Redis has none of the append scripts: the ingest loads them
    and writes again at once, instead of counting a Redis error and backing off."""
    names = Names("m", settings.topic_prefix, settings.key_prefix)
    redis.script_flush()
    ingest = start_role("ingest", TOML)
    device = plain_paho(settings)
    doc = {"x": [1, 2, 3], "y": 1, "id": "first"}
    device.publish(names.samples_topic, json.dumps(doc), qos=1).wait_for_publish(10)
    device.disconnect()
    eventually(lambda: "first" in ids_in_stream(redis, names), 30, "the first message")
    assert not [line for line in ingest.lines if "redis unavailable" in line]


def _samples(ids: list[str | None], first: float = 0) -> Samples:
    n = len(ids)
    x = np.arange(first, first + 3 * n, dtype=np.float32).reshape(n, 3)
    return Samples(x, x[:, 0].copy(), tuple(ids))


def test_repeats_are_dropped_within_a_write_and_across_chunks(redis, settings):
    names = Names("d", settings.topic_prefix, settings.key_prefix)
    queue = SampleStream(redis, names, (3,))
    big = [f"b{i}" for i in range(CHUNK_SAMPLES)]
    written = queue.write(
        [
            _samples(["a", "b", "a"]),
            _samples(["b", None, "c"], 10),
            _samples(big, 100),
            _samples(big[:5] + ["z"], 1000),
        ],
        dedup_window_s=60,
    )
    assert (written.added, written.duplicates) == (4 + CHUNK_SAMPLES + 1, 2 + 5)
    got = entries(redis, names)
    assert len(got) == 3, "an entry a call: the first two messages, the big one, the last"
    assert got[0].ids == ("a", "b", None, "c"), "ids in the entry, a null where none"
    np.testing.assert_array_equal(got[0].x[:, 0], [0, 3, 13, 16], "the first 'a' is kept")
    assert got[-1].ids == ("z",) and got[-1].x[0, 0] == 1015


def test_an_id_is_remembered_for_the_window_and_no_longer(redis, settings):
    names = Names("w", settings.topic_prefix, settings.key_prefix)
    queue = SampleStream(redis, names, (3,))
    now = [1000.0]
    queue.appender.clock = lambda: now[0]

    def added(window_s: int = 10) -> int:
        return queue.write([_samples(["a"])], dedup_window_s=window_s).added

    assert added() == 1
    now[0] += 9.9
    assert added() == 0, "seen within the window"
    now[0] += 10
    assert added() == 0, "remembered up to twice the window"
    now[0] += 10.2
    assert added() == 1, "forgotten after that"
    assert added(window_s=0) == 1, "de-duplication off"


def test_backlog_counts_the_samples_the_learner_has_not_acknowledged(redis, settings):
    names = Names("b", settings.topic_prefix, settings.key_prefix)
    queue = SampleStream(redis, names, (3,))
    assert queue.appender.backlog() == 0
    queue.write(
        [_samples(["a", "b"]), _samples([None]), _samples(["c", "d", "e"])], entry_each=True
    )
    assert queue.appender.backlog() == 6, "no learner yet: everything"
    queue.ensure_group()
    taken = queue.read("learner", 2, None)
    assert queue.appender.backlog() == 6, "delivered but not acknowledged"
    queue.ack([taken[0].id])
    assert queue.appender.backlog() == 4
    queue.ack([e.id for e in queue.read("learner", 10, None)] + [taken[1].id])
    assert queue.appender.backlog() == 0
    assert queue.write([_samples(["f"])], backlog=True).backlog == 1


# -- back-pressure ------------------------------------------------------------------------------

HELD = """
[models.p]
inputs = 3
task = "binary"

[models.p.ingest]
max_backlog_samples = 100
"""


def test_back_pressure_holds_samples_at_the_broker_until_the_learner_catches_up(
    start_role, redis, settings
):
    """More samples than the broker's default queue (1000) wait there; none is lost."""
    names = Names("p", settings.topic_prefix, settings.key_prefix)
    worker = start_role("ingest", HELD)
    sent = [f"p{i}" for i in range(3000)]
    device = plain_paho(settings)
    infos = [
        device.publish(names.samples_topic, json.dumps({"x": [i, 1, 2], "y": 1, "id": sid}), qos=1)
        for i, sid in enumerate(sent)
    ]
    for info in infos:
        info.wait_for_publish(30)
    device.disconnect()

    eventually(lambda: "back-pressure on" in worker.output, 30, "back-pressure")
    held = int(redis.get(names.ingest_count_key))  # samples appended
    time.sleep(1.0)
    assert int(redis.get(names.ingest_count_key)) == held, "ingest waits for the learner"
    assert 100 < held <= 100 + 500, "the limit, overshot by one run at most"

    # A learner catches up; ingest resumes by itself and everything arrives exactly once.
    queue = SampleStream(redis, names, (3,))
    queue.ensure_group()
    got: list[str] = []
    deadline = time.monotonic() + 60
    while len(got) < len(sent) and time.monotonic() < deadline:
        batch = queue.read("learner", 200, 200)
        queue.ack([e.id for e in batch])
        got += [i for e in batch for i in e.samples.ids or ()]
    assert sorted(got) == sorted(sent)
    assert "back-pressure off" in worker.output


def test_the_deploy_acl_lets_ingest_append_once_and_measure(request):
    """Ingest's scripts run with its least-privilege Redis user (deploy/redis/make-acl.sh)."""
    server = request.getfixturevalue("acl_redis")
    queue = SampleStream(redis_as(server, "ingest"), Names("acl"), (3,))
    own = sample_id("dev", "d")  # a sender's: its share of the ids counted
    written = queue.write(
        [_samples(["a", "b"]), _samples(["b", None, own])],
        [("t", Rejection("bad", b"x"))],
        dedup_window_s=60,
        backlog=True,
    )
    again = queue.write([_samples(["a", "c", own])], dedup_window_s=60)
    assert (written.added, written.duplicates, written.backlog) == (4, 1, 4)
    assert (again.added, again.duplicates) == (1, 2)
    assert queue.appender.backlog() == 5
