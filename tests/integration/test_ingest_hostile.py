"""Samples messages built to hurt ingest, against real mosquitto and Redis, with ingest as a
worker process: each test ends with the same process alive and storing good samples.

The largest valid message, one Redis refuses, documents cheap to send and expensive to
reject, growth a device controls (keys, windows, ids) and a QoS 0 flood while ingest holds
back: none crashes the worker, floods the dead letters or grows without bound.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable

import numpy as np
import pytest

from streamlearn.contract.names import Names
from streamlearn.stack.embedded import free_port
from streamlearn.store.appends import CHUNK_SAMPLES
from streamlearn.store.stream import SampleStream, unpack
from tests.conftest import RoleProcess, eventually, plain_paho

FLAT = """
[models.h]
inputs = 3
task = "regression"

[models.h.ingest]
max_payload_bytes = 2_000_000
"""


def names_of(settings, model: str = "h") -> Names:
    return Names(model, settings.topic_prefix, settings.key_prefix)


def publish(settings, names: Names, payloads: list, qos: int = 1, topic: str | None = None) -> None:
    device = plain_paho(settings)
    try:
        for p in payloads:
            raw = p if isinstance(p, bytes) else json.dumps(p).encode()
            device.publish(topic or names.samples_topic, raw, qos=qos).wait_for_publish(30)
    finally:
        device.disconnect()
        device.loop_stop()


def stream(redis, names: Names, shape: tuple[int, ...] = (3,)) -> list:
    return [unpack(f, shape) for _, f in redis.xrange(names.samples_key)]


def deadletters(redis, names: Names) -> list[dict[str, bytes]]:
    return [{k.decode(): v for k, v in f.items()} for _, f in redis.xrange(names.deadletter_key)]


def still_ingesting(worker: RoleProcess, pid: int, redis, names: Names, settings) -> None:
    """The same process, alive, and a good sample published now reaches the stream."""
    assert worker.proc.pid == pid and worker.proc.poll() is None, worker.output[-3000:]
    before = redis.xlen(names.samples_key)
    x = [7.0] * (3 if names.model == "h" else 1)
    doc = {"x": x, "y": 0.5} if names.model == "h" else {"x": [x, x], "y": 0.5}
    publish(settings, names, [doc])
    eventually(lambda: redis.xlen(names.samples_key) > before, 30, "a good sample stored")
    assert worker.proc.pid == pid and worker.proc.poll() is None, worker.output[-3000:]


# -- item 2: the largest valid message; a message Redis refuses -------------------------------


def test_the_largest_valid_message_is_stored_whole_with_every_id(start_role, redis, settings):
    """10,000 samples with ids (max_samples_per_message): Lua's `unpack` returns at most
    ~8,000 values, so the append script must pass ids to Redis in chunks."""
    names = names_of(settings)
    worker = start_role("ingest", FLAT)
    pid = worker.proc.pid
    n = 10_000
    rows = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
    columnar = {"x": rows.tolist(), "y": [0.5] * n, "ids": [f"c{i}" for i in range(n)]}
    listed = {"samples": [{"x": rows[i].tolist(), "y": 1.5, "id": f"l{i}"} for i in range(n)]}
    publish(settings, names, [columnar, listed])
    eventually(lambda: redis.xlen(names.samples_key) >= 2, 60, "both messages stored")

    first, second = stream(redis, names)
    assert len(first) == len(second) == n, "each message is one entry, whole"
    np.testing.assert_array_equal(first.x, rows)
    np.testing.assert_array_equal(second.x, rows)
    assert first.ids == tuple(f"c{i}" for i in range(n))
    assert second.ids == tuple(f"l{i}" for i in range(n))
    assert redis.xlen(names.deadletter_key) == 0

    publish(settings, names, [columnar])  # sent again: every id is known, nothing added
    still_ingesting(worker, pid, redis, names, settings)
    assert [len(e) for e in stream(redis, names)] == [n, n, 1]


WINDOWED = """
[models.s]
inputs = 1
task = "regression"
architecture = "lstm"
window = 2
hidden = [4]
"""


def test_a_message_redis_refuses_is_dead_lettered_and_the_next_flows(start_role, redis, settings):
    """A key of the wrong type makes a script fail for good: retrying would crash-loop or
    stall. The message that meets it is dead-lettered with Redis's reason, once."""
    names = names_of(settings, "s")
    worker = start_role("ingest", WINDOWED)
    pid = worker.proc.pid
    bad_window = names.key("window:dev-bad")
    redis.set(bad_window, "not a window")
    refused = {"key": "dev-bad", "seq": 1, "x": [1.0], "y": 1.0}
    good = [{"key": "dev-ok", "seq": s, "x": [float(s)], "y": float(s)} for s in (1, 2, 3)]
    publish(settings, names, [refused, *good])

    eventually(lambda: redis.xlen(names.deadletter_key) >= 1, 30, "the dead letter")
    eventually(lambda: redis.zcard(names.key("window:dev-ok")) == 3, 30, "dev-ok's window")
    [letter] = deadletters(redis, names)
    assert letter["kind"] == b"redis_refused"
    reason = letter["reason"].decode()
    assert reason.startswith("redis refused it: WRONGTYPE") and bad_window in reason, reason
    assert json.loads(letter["payload"]) == refused
    assert redis.get(bad_window) == b"not a window", "the refused call wrote nothing"
    trained = stream(redis, names, (2, 1))
    assert [e.x[:, :, 0].tolist() for e in trained] == [[[1, 2]], [[2, 3]]]

    # The samples script too: a broken de-duplication key refuses samples with ids.
    gen = names.key("ingest:seen:gen")
    redis.hset(gen, "broken", 1)
    with_id = {"samples": [{"x": [[1], [2]], "y": 1, "id": "a"}, {"x": [1], "y": 0}]}
    publish(settings, names, [with_id])
    eventually(lambda: redis.xlen(names.deadletter_key) >= 3, 30, "two more dead letters")
    rejected_item, refusal = deadletters(redis, names)[1:]
    assert rejected_item["kind"] == b"wrong_type"
    assert refusal["kind"] == b"redis_refused" and gen in refusal["reason"].decode()
    redis.delete(gen)
    still_ingesting(worker, pid, redis, names, settings)
    assert redis.xlen(names.deadletter_key) == 3, "each dead letter once"


def test_redis_out_of_memory_is_retried_without_losing_the_message(start_role, redis, settings):
    """OOM passes: the message waits (unacknowledged) and is stored once Redis has room."""
    names = names_of(settings)
    worker = start_role("ingest", FLAT)
    pid = worker.proc.pid
    redis.config_set("maxmemory", 1)
    try:
        publish(settings, names, [{"x": [1, 2, 3], "y": 1.0, "id": "kept"}])
        eventually(lambda: "redis unavailable" in worker.output, 30, "a retry")
        assert redis.xlen(names.samples_key) == 0
        assert redis.xlen(names.deadletter_key) == 0, "OOM is not the message's fault"
    finally:
        redis.config_set("maxmemory", 0)
    eventually(lambda: redis.xlen(names.samples_key) == 1, 30, "stored once Redis has room")
    assert stream(redis, names)[0].ids == ("kept",)
    still_ingesting(worker, pid, redis, names, settings)


# -- item 8: cheap to send, expensive to reject ------------------------------------------------


def test_a_document_of_90000_unknown_fields_gets_a_short_reason(start_role, redis, settings):
    names = names_of(settings)
    worker = start_role("ingest", FLAT)
    pid = worker.proc.pid
    doc = {f"field{i}": 0 for i in range(90_000)}
    publish(settings, names, [doc])
    eventually(lambda: redis.xlen(names.deadletter_key) == 1, 30, "the dead letter")
    [letter] = deadletters(redis, names)
    assert letter["kind"] == b"unknown_field"
    assert letter["reason"].decode() == (
        "90000 fields, at most 4 allowed; unknown: 'field0', 'field1', 'field2' (and 89997 more)"
    )
    assert len(letter["payload"]) == 1024 and int(letter["size"]) > 1_000_000
    still_ingesting(worker, pid, redis, names, settings)


def test_a_list_of_10000_invalid_items_is_one_dead_letter(start_role, redis, settings):
    """The dead-letter stream is capped (10,000): one letter per item would flush it."""
    names = names_of(settings)
    worker = start_role("ingest", FLAT)
    pid = worker.proc.pid
    earlier = [b"{not json", b'{"x": [1], "y": 0}', b"[1, 2, 3]"]
    items = [{"x": [1, 2], "y": 0}] * 9_999 + [{"x": [1, 2, 3], "y": 0, "id": "ok"}]
    publish(settings, names, [*earlier, {"samples": items}])
    eventually(lambda: redis.xlen(names.samples_key) == 1, 30, "the good item")
    letters = deadletters(redis, names)
    assert len(letters) == 4, "the three earlier ones, then one for the whole list"
    assert [d["payload"] for d in letters[:3]] == earlier
    assert [d["kind"] for d in letters] == [b"invalid_json", b"wrong_shape", b"wrong_type"] + [
        b"wrong_shape"
    ]
    reason = letters[3]["reason"].decode()
    assert reason.startswith("samples.0: x must have shape [3], got [2]; samples.1: ")
    assert reason.endswith("(and 9994 more; 9999 of 10000 samples rejected)")
    assert reason.count("samples.") == 5 and len(reason) < 400
    assert len(letters[3]["payload"]) == 1024, "the payload, truncated"
    assert stream(redis, names)[0].ids == ("ok",)
    still_ingesting(worker, pid, redis, names, settings)


# -- item 6: growth a device controls ----------------------------------------------------------

BOUNDED = """
[models.s]
inputs = 1
task = "regression"
architecture = "lstm"
window = 2
hidden = [4]

[models.s.ingest]
max_keys_per_message = 10
max_devices = 25
max_dedup_ids = 1000
"""


def window_keys(redis, names: Names) -> set[str]:
    prefix = names.key("window:")
    return {k.decode()[len(prefix) :] for k in redis.scan_iter(f"{prefix}*", count=1000)}


def test_distinct_keys_beyond_the_cap_of_a_message_are_refused(start_role, redis, settings):
    names = names_of(settings, "s")
    worker = start_role("ingest", BOUNDED)
    pid = worker.proc.pid
    items = [{"key": f"k{i}", "seq": 1, "x": [1.0]} for i in range(50)]
    publish(settings, names, [{"samples": items}])
    eventually(lambda: redis.xlen(names.deadletter_key) == 1, 30, "the dead letter")
    assert window_keys(redis, names) == {f"k{i}" for i in range(10)}
    [letter] = deadletters(redis, names)
    assert letter["kind"] == b"too_many_keys"
    reason = letter["reason"].decode()
    assert reason.startswith("samples.10: key 'k10': more than max_keys_per_message=10")
    assert reason.endswith("(and 35 more; 40 of 50 samples rejected)")
    still_ingesting(worker, pid, redis, names, settings)


def test_windows_and_dedupe_ids_stay_bounded(start_role, redis, settings):
    """200 devices, max_devices = 25: the windows of the 25 most recent are kept. 20,000
    ids, max_dedup_ids = 1000: Redis holds about that many, and still knows the newest."""
    names = names_of(settings, "s")
    worker = start_role("ingest", BOUNDED)
    pid = worker.proc.pid
    for m in range(20):  # one message at a time: "most recent" is then well defined
        items = [{"key": f"d{m}-{j}", "seq": 1, "x": [1.0]} for j in range(10)]
        publish(settings, names, [{"samples": items}])
        eventually(lambda m=m: redis.exists(names.key(f"window:d{m}-9")), 30, f"message {m}")
    kept = window_keys(redis, names)
    assert len(kept) == 25, sorted(kept)
    assert {f"d19-{j}" for j in range(10)} | {f"d18-{j}" for j in range(10)} <= kept
    assert redis.zcard(names.key("ingest:devices")) == 25

    def message(m: int) -> dict:
        x = [[[float(i)], [1.0]] for i in range(100)]
        return {"x": x, "y": [0.0] * 100, "ids": [f"i{m}-{i}" for i in range(100)]}

    publish(settings, names, [message(m) for m in range(200)])
    eventually(lambda: int(redis.get(names.ingest_count_key)) >= 20_000, 60, "20,000 samples")
    remembered = sum(redis.scard(names.key(f"ingest:seen:{g}")) for g in (0, 1))
    assert 500 <= remembered <= 1000 + 2 * CHUNK_SAMPLES, remembered
    before = redis.xlen(names.samples_key)
    publish(settings, names, [message(199)])  # the newest ids: still known
    still_ingesting(worker, pid, redis, names, settings)
    assert redis.xlen(names.samples_key) == before + 1, "only the good sample was added"


SHARED = """
[models.dd]
inputs = 1
task = "regression"

[models.dd.ingest]
max_dedup_ids = 1000
"""


def test_one_senders_flood_of_new_ids_forgets_no_other_senders_ids(start_role, redis, settings):
    """Issue 62, finding 6. max_dedup_ids = 1000, a client's share 5%: 25 ids a generation.
    mallory floods 2,400 new ids on samples/mallory; alice's id, sent before the flood, is
    still known after it: her redelivered message adds nothing (before, the flood turned
    the generations over twice and it was appended again). mallory's samples are all
    appended; its ids past its share are not remembered, and counted."""
    names = names_of(settings, "dd")
    port = free_port()
    start_role("ingest", SHARED, env={"STREAMLEARN_METRICS_PORT": str(port)})
    count = lambda: int(redis.get(names.ingest_count_key) or 0)  # noqa: E731
    alice = names.topic("samples/alice")
    sample = {"x": [1.0], "y": 1.0, "id": "a-1"}
    publish(settings, names, [sample], topic=alice)
    eventually(lambda: count() == 1, 30, "alice's sample")
    for m in range(4):  # one message a write: each write may turn a generation over
        ids = [f"m{m}-{i}" for i in range(600)]
        flood = {"x": [[float(i)] for i in range(600)], "y": [0.0] * 600, "ids": ids}
        publish(settings, names, [flood], topic=names.topic("samples/mallory"))
        eventually(lambda m=m: count() == 601 + 600 * m, 30, f"mallory's message {m}")
    publish(settings, names, [sample, {"x": [2.0], "y": 2.0}], topic=alice)  # again, then new
    eventually(lambda: scrape(port, "samples_total") >= 2402, 30, "alice's next sample")
    ids = [i for _, f in redis.xrange(names.samples_key) for i in unpack(f, (1,)).ids or ()]
    assert ids.count("\x1fs5:alice:a-1") == 1, "alice's redelivered sample was appended again"
    assert count() == 2402 and scrape(port, "duplicate_samples_total") == 1
    assert scrape(port, "dedup_share_exceeded_total") == 2400 - 25


# -- item 7: QoS 0 while ingest holds back -----------------------------------------------------

HELD = """
[models.h]
inputs = 3
task = "regression"

[models.h.ingest]
max_backlog_samples = 10
max_inbox_messages = 200
max_inbox_bytes = 1_000_000
"""


def scrape(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.search(rf"^streamlearn_ingest_{name}\{{[^}}]*\}} ([-+0-9.eE]+)$", text, re.M)
    assert found, f"no metric {name}"
    return float(found[1])


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


@pytest.fixture
def held_worker(
    start_role, redis, settings
) -> tuple[RoleProcess, int, Callable[[str], float], int]:
    """An ingest worker holding back: more samples wait than max_backlog_samples; and the
    samples published to get there."""
    port = free_port()
    worker = start_role("ingest", HELD, env={"STREAMLEARN_METRICS_PORT": str(port)})
    names = names_of(settings)
    publish(settings, names, [{"x": [i, 0, 0], "y": 1.0} for i in range(20)])
    sent = [20]

    def held() -> bool:
        """One more sample until a write measures the backlog (ingest measures it with a
        write, at most every poll_s: 20 samples in one run may have been measured before)."""
        if "back-pressure on" in worker.output:
            return True
        publish(settings, names, [{"x": [sent[0], 0, 0], "y": 1.0}])
        sent[0] += 1
        return False

    eventually(held, 30, "back-pressure")
    return worker, port, lambda name: scrape(port, name), sent[0]


def test_a_qos0_flood_while_held_back_is_dropped_and_counted(held_worker, redis, settings):
    """200 MB of QoS 0 messages arrive while ingest holds back: the inbox keeps at most
    max_inbox_messages / max_inbox_bytes of them, drops the rest and counts them."""
    worker, _, metric, held = held_worker
    names = names_of(settings)
    pid = worker.proc.pid
    rss_before = rss_bytes(pid)
    sent, junk = 20_000, b"j" * 10_000
    publish(settings, names, [junk] * sent, qos=0)
    eventually(
        lambda: metric("qos0_dropped_total") + metric("inbox_messages") >= sent, 60, "the flood"
    )
    assert metric("qos0_dropped_total") >= sent - 200
    assert metric("inbox_messages") <= 200 and metric("inbox_bytes") <= 1_000_000
    grown = rss_bytes(pid) - rss_before
    assert grown < 50_000_000, f"RSS grew by {grown / 1e6:.0f} MB for a 200 MB flood"

    # The learner catches up: ingest resumes, and QoS 1 samples were never dropped.
    queue = SampleStream(redis, names, (3,))
    queue.ensure_group()
    queue.ack([e.id for e in queue.read("learner", 1000, None)])
    eventually(lambda: "back-pressure off" in worker.output, 30, "back-pressure off")
    still_ingesting(worker, pid, redis, names, settings)
    # the last held sample may come back from the broker after the newest one: wait for it
    stored = lambda: sum(len(e) for e in stream(redis, names))  # noqa: E731
    eventually(lambda: stored() >= held + 1, 30, "every held QoS 1 sample")
    assert stored() == held + 1


def test_qos1_messages_past_the_inbox_bytes_wait_at_the_broker_and_all_arrive(
    held_worker, redis, settings
):
    """6 MB of QoS 1 messages (100 kB each) while ingest holds back: the inbox keeps at
    most max_inbox_bytes of them (1 MB), the broker the rest; once the learner catches up
    every one is stored, exactly once."""
    worker, _, metric, _ = held_worker
    names = names_of(settings)
    pid = worker.proc.pid
    big = [
        json.dumps({"x": [i, 1, 1], "y": 1.0, "id": f"big{i}"}).encode() + b" " * 100_000
        for i in range(60)
    ]
    publish(settings, names, big)
    eventually(lambda: metric("inbox_messages") >= 9, 30, "the inbox full of big messages")
    # at most 1 MB: 10 big messages (the small ones sent to get ingest held back wait there
    # too, so the count of messages may be a few more)
    assert metric("inbox_bytes") <= 1_000_000 and metric("inbox_messages") <= 200

    queue = SampleStream(redis, names, (3,))
    queue.ensure_group()

    def stored() -> list[str]:  # an entry of several messages has None for an id-less one
        return [i for e in stream(redis, names) for i in e.ids or () if i and "big" in i]

    def learned_all() -> bool:  # the learner's part: read and acknowledge what came
        queue.ack([e.id for e in queue.read("learner", 1000, None)])
        assert metric("inbox_bytes") <= 1_000_000
        return len(stored()) >= 60

    eventually(learned_all, 90, "every big message stored")
    assert sorted(stored()) == sorted(f"big{i}" for i in range(60)), "each once"
    assert redis.xlen(names.deadletter_key) == 0
    still_ingesting(worker, pid, redis, names, settings)
