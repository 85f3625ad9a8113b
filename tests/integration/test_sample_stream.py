"""The learner's side of the sample stream against a real Redis: packed reads and acks."""

from __future__ import annotations

import numpy as np

from streamlearn.contract.names import Names
from streamlearn.contract.records import Samples
from streamlearn.store.stream import GROUP, SampleStream


def make_queue(redis, settings, shape=(3,)) -> SampleStream:
    queue = SampleStream(redis, Names("q", settings.topic_prefix, settings.key_prefix), shape)
    queue.ensure_group()
    return queue


def test_packed_read_returns_every_sample_in_order_and_names_unusable_entries(redis, settings):
    queue = make_queue(redis, settings)
    rng = np.random.default_rng(0)
    sizes = [1, 64, 1, 1, 7, 1]
    parts = [Samples(rng.normal(size=(n, 3)).astype(np.float32), rng.normal(size=n)) for n in sizes]
    queue.write(parts[:3], entry_each=True)
    bad = redis.xadd(queue.key, {"n": 2, "x": b"short", "y": b""})
    queue.write(parts[3:5], entry_each=True)
    last = parts[5]  # fields in another order than lua/entry.lua's: read all the same
    redis.xadd(queue.key, {"y": last.y.astype(np.float32).tobytes(), "x": last.x.tobytes(), "n": 1})

    packed = queue.read_packed("c", 100, None)

    assert len(packed.ids) == len(sizes) and [e for e, _ in packed.unusable] == [bad]
    assert "unusable stream entry" in packed.unusable[0][1]
    np.testing.assert_array_equal(packed.x, np.concatenate([p.x for p in parts]))
    np.testing.assert_array_equal(packed.y, np.concatenate([p.y for p in parts]).astype(np.float32))
    assert packed.ends.tolist() == np.cumsum(sizes).tolist()
    assert packed.ids == sorted(packed.ids), "stream order"
    assert not queue.read_packed("c", 100, None).ids, "delivered once"
    assert redis.xpending(queue.key, GROUP)["pending"] == len(sizes) + 1


def test_packed_read_counts_entries_and_waits_for_the_first(redis, settings):
    queue = make_queue(redis, settings)
    queue.write([Samples(np.ones((1, 3), np.float32), np.ones(1))] * 10, entry_each=True)
    assert len(queue.read_packed("c", 4, None).ids) == 4, "COUNT is in entries"
    assert len(queue.read_packed("c", 100, 50).ids) == 6
    assert len(queue.read_packed("c", 100, 50)) == 0, "waited, nothing came"


def test_ack_of_many_ids_acknowledges_exactly_those(redis, settings):
    queue = make_queue(redis, settings)
    queue.write([Samples(np.ones((1, 3), np.float32), np.ones(1))] * 2500, entry_each=True)
    ids = queue.read_packed("c", 3000, None).ids
    queue.ack(ids[:2400], chunk=1000)  # several script calls, each past Lua's unpack chunk
    pending = redis.xpending_range(queue.key, GROUP, "-", "+", 1000)
    assert [p["message_id"] for p in pending] == ids[2400:]


def test_packed_read_of_entries_alike_and_of_sizes_that_differ_late(redis, settings):
    queue = make_queue(redis, settings)
    sizes = [2, 2, 2, 5, 2]
    parts = [Samples(np.full((n, 3), i, np.float32), np.full(n, i)) for i, n in enumerate(sizes)]
    queue.write(parts[:3], entry_each=True)
    assert queue.read_packed("c", 100, None).ends.tolist() == [2, 4, 6], "one count for all"
    queue.write(parts, entry_each=True)
    packed = queue.read_packed("c", 100, None)
    assert packed.ends.tolist() == np.cumsum(sizes).tolist()
    np.testing.assert_array_equal(packed.x, np.concatenate([p.x for p in parts]))


def test_a_read_and_an_ack_sent_ahead_are_answered_after_redis_lost_its_scripts(redis, settings):
    queue = make_queue(redis, settings)
    queue.write([Samples(np.ones((1, 3), np.float32), np.ones(1))] * 5, entry_each=True)
    first = queue.read_packed("c", 1, None).ids  # the scripts are loaded, then lost
    redis.script_flush()
    rest = queue.packed(queue.send_read("c", 10).result()).ids
    assert len(rest) == 4
    redis.script_flush()
    assert queue.send_ack(first + rest).result() == 5
    assert redis.xpending(queue.key, GROUP)["pending"] == 0
