"""Hypothesis payloads through the real ingest path, against a real Redis (and mosquitto).

Whatever arrives, ingest must not crash; every sample the reference parser accepts is in
the stream (once per id), in order, and every rejection is a dead letter with its reason.
"""

from __future__ import annotations

import json
import struct
import tomllib
import uuid
from typing import Any

import hypothesis
import numpy as np
import paho.mqtt.client as paho
import pytest
import redis as redis_lib
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from paho.mqtt.enums import CallbackAPIVersion

from streamlearn.config import parse_config
from streamlearn.contract.names import Names
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.records import Rejection, Samples
from streamlearn.ingest.loop import Ingest
from streamlearn.mqtt import BufferedClient
from streamlearn.store.stream import SampleStream, unpack
from tests.conftest import eventually, plain_paho
from tests.unit.test_payloads import _mutate, json_values

TOML = """
[models.fz]
inputs = 3
task = "binary"

[models.fz.ingest]
max_payload_bytes = 600
max_samples_per_message = 3
deadletter_maxlen = 100000
deadletter_payload_bytes = 64
"""
MODEL = parse_config(tomllib.loads(TOML)).model("fz")
REFERENCE = PayloadParser(MODEL, fast=False)
SETTINGS = hypothesis.settings(
    deadline=None, database=None, suppress_health_check=list(HealthCheck)
)

# One draw per row (random float32 bits: mostly finite, some huge, NaN or infinite) keeps
# generation cheap enough for ten thousand payloads.
rows = st.binary(min_size=12, max_size=12).map(
    lambda b: [float(v) for v in struct.unpack("<3f", b)]
)
ids = st.sampled_from([None, "a", "b", "c", "d", "é", "f/g", "x" * 300])


@st.composite
def payloads(draw: Any) -> bytes:
    """Valid payloads of every form, the same mutated, truncated, or junk."""
    n = draw(st.integers(1, 4))
    xs = draw(st.lists(rows, min_size=n, max_size=n))
    ys = [draw(st.sampled_from([0, 1, 0.25, 2, -1, "1", None]))] * n
    sid = draw(st.lists(ids, min_size=n, max_size=n))
    form = draw(st.sampled_from(["single", "columnar", "list"]))
    if form == "single":
        doc: Any = {"x": xs[0], "y": ys[0]} | ({} if sid[0] is None else {"id": sid[0]})
    elif form == "columnar":
        doc = {"x": xs, "y": ys} | ({} if None in sid else {"ids": sid})
    else:
        items = [
            {"x": x, "y": y} | ({} if i is None else {"id": i})
            for x, y, i in zip(xs, ys, sid, strict=True)
        ]
        doc = {"samples": items}
    how = draw(st.integers(0, 9))
    if how >= 4 and how < 8:
        doc = draw(_mutate(doc))
    raw = json.dumps(doc).encode()
    if how == 8:
        return raw[: draw(st.integers(0, len(raw)))]
    if how == 9:
        return draw(st.binary(max_size=30) | json_values.map(lambda v: json.dumps(v).encode()))
    return raw


def expected(raws: list[bytes], seen: set[str]) -> tuple[list[Samples], list[Rejection]]:
    """What the reference parser accepts, less ids already `seen`, and what it rejects."""
    kept: list[Samples] = []
    rejected: list[Rejection] = []
    for raw in raws:
        samples, _, rejections, _ = REFERENCE.parse_message(raw)
        rejected += rejections
        if samples is None:
            continue
        ids = samples.ids or (None,) * len(samples)
        keep = []
        for i, sid in enumerate(ids):
            if sid is None or sid not in seen:
                keep.append(i)
                seen.add(sid)
        if keep:
            got_ids = None if samples.ids is None else tuple(ids[i] for i in keep)
            kept.append(Samples(samples.x[keep], samples.y[keep], got_ids))
    return kept, rejected


def check(redis: Any, names: Names, kept: list[Samples], rejected: list[Rejection]) -> None:
    got = [unpack(f, (3,)) for _, f in redis.xrange(names.samples_key)]
    assert len(got) <= len(kept), "at most an entry per message with new samples"
    if kept:  # an entry holds a run of messages: the samples, in order, each once
        np.testing.assert_array_equal(
            np.concatenate([g.x for g in got]), np.concatenate([k.x for k in kept])
        )
        np.testing.assert_array_equal(
            np.concatenate([g.y for g in got]), np.concatenate([k.y for k in kept])
        )
        assert [i for g in got for i in (g.ids or (None,) * len(g.y))] == [
            i for k in kept for i in (k.ids or (None,) * len(k.y))
        ], "each sample's id, None where it has none"
    else:
        assert got == []
    dead = [f for _, f in redis.xrange(names.deadletter_key)]
    assert [d[b"reason"].decode() for d in dead] == [r.reason for r in rejected]
    assert all(d[b"reason"].strip() for d in dead)
    assert [d[b"payload"] for d in dead] == [r.payload[:64] for r in rejected]


def message(mid: int, topic: str, payload: bytes) -> paho.MQTTMessage:
    msg = paho.MQTTMessage(mid, topic.encode())
    msg.payload, msg.qos = payload, 1
    return msg


@hypothesis.settings(SETTINGS, max_examples=1000)
@given(st.lists(payloads(), min_size=10, max_size=10))
def test_ten_thousand_payloads_through_the_ingest_loop(redis_server, batch):
    """The bulk, fed straight into the loop that paho's thread feeds in production."""
    client = redis_lib.Redis(port=redis_server.port)
    names = Names("fz", key_prefix=f"fz{uuid.uuid4().hex[:10]}")
    ingest = Ingest(PayloadParser(MODEL), SampleStream.of(client, names, MODEL), MODEL.ingest)
    device = BufferedClient(CallbackAPIVersion.VERSION2)  # never connected: acks go nowhere
    for mid, raw in enumerate(batch, 1):
        ingest.on_message(device, None, message(mid, names.samples_topic, raw))
    try:
        assert ingest.run(max_messages=len(batch)) == len(batch)
        check(client, names, *expected(batch, set()))
    finally:
        client.delete(*client.keys(f"{names.key_prefix}:*") or ["-"])
        client.close()


@pytest.fixture
def worker(start_role):
    return start_role("ingest", TOML)


def test_payloads_through_mosquitto_and_a_worker_process(worker, redis, settings):
    """A portion through the broker to a worker process, in order, with PUBACKs."""
    names = Names("fz", settings.topic_prefix, settings.key_prefix)
    sent: list[bytes] = []

    @hypothesis.settings(SETTINGS, max_examples=5)
    @given(st.lists(payloads(), min_size=100, max_size=100))
    def publish(batch: list[bytes]) -> None:
        sent.extend(batch)

    publish()
    device = plain_paho(settings)
    for info in [device.publish(names.samples_topic, raw, qos=1) for raw in sent]:
        info.wait_for_publish(30)
    device.disconnect()
    kept, rejected = expected(sent, set())
    done = sum(len(s) for s in kept)
    eventually(
        lambda: (
            int(redis.get(names.ingest_count_key) or 0) >= done
            and redis.xlen(names.deadletter_key) >= len(rejected)
        ),
        60,
        "every payload handled",
    )
    check(redis, names, kept, rejected)
    assert worker.proc.poll() is None, worker.output[-3000:]


def test_the_dead_letter_stream_is_capped(redis, settings):
    names = Names("cap", settings.topic_prefix, settings.key_prefix)
    model = MODEL.model_copy(
        update={"ingest": MODEL.ingest.model_copy(update={"deadletter_maxlen": 50})}
    )
    ingest = Ingest(PayloadParser(model), SampleStream.of(redis, names, model), model.ingest)
    device = BufferedClient(CallbackAPIVersion.VERSION2)
    for mid in range(1, 301):
        ingest.on_message(device, None, message(mid, names.samples_topic, b"junk %d" % mid))
    assert ingest.run(max_messages=300) == 300
    assert redis.xlen(names.deadletter_key) == 50
    newest = redis.xrevrange(names.deadletter_key, count=1)[0][1]
    assert newest[b"payload"] == b"junk 300" and ingest.counters.rejected == 300
