"""Partitioned streams (`ingest.partitions`): one model's samples over several streams.

How a message is split, and end to end with real ingest, learner and actor processes on a
real Redis: every partition gets its share, a resent id is still dropped, the learner trains
on every sample once, and a device's observations stay in one partition, where the actor
finds its window.
"""

from __future__ import annotations

import tomllib

import numpy as np

from streamlearn.config import parse_config
from streamlearn.contract.names import Names
from streamlearn.contract.records import Observations, Parsed, Rejection, Samples
from streamlearn.store.partitions import open_stream, partition_of, split
from tests.conftest import eventually, launch_role, samples_seen
from tests.samples import linear_messages, sine_observations

TOML = """
[models.p]
inputs = 3
task = "regression"
hidden = [8]

[models.p.ingest]
partitions = 3

[models.p.learner]
max_batch = 32
buckets = [32]  # one padded size: one trace before ready (batch sizes are not this test's)

[models.w]
inputs = 1
task = "regression"
architecture = "conv1d"
window = 3
hidden = [8]

[models.w.ingest]
partitions = 2

[models.w.learner]
max_batch = 32
buckets = [32]

[models.w.gateways]
hub = ["*"]  # the test's one client sends and asks for every device
"""


def test_a_message_is_split_by_sample_id_and_by_key():
    ids = tuple(f"s{i}" for i in range(30))
    x = np.arange(90, dtype=np.float32).reshape(30, 3)
    dead = [Rejection("bad row", b"", "invalid")]
    parts = split(Parsed(Samples(x, x[:, 0], ids), None, dead), b"payload", 3)
    assert sorted(i for i, _ in parts) == [0, 1, 2]
    for i, part in parts:
        assert all(partition_of(s, 3) == i for s in part.samples.ids)
        assert np.array_equal(part.samples.y, part.samples.x[:, 0]), "rows stay whole"
    assert sum(len(p.samples) for _, p in parts) == 30
    assert [len(p.rejections) for _, p in parts] == [1, 0, 0], "dead letters go once"

    no_ids = split(Parsed(Samples(x, x[:, 0]), None, []), b"payload", 3)
    assert [(i, len(p.samples)) for i, p in no_ids] == [(partition_of(b"payload", 3), 30)]

    keys = ("a", "b", "a", "c", "b", "a")
    seq = np.arange(6, dtype=np.float64)
    obs = Observations(keys, seq, np.zeros((6, 1), np.float32), np.zeros(6, np.float32))
    for i, part in split(Parsed(None, obs, []), b"payload", 2):
        assert {partition_of(k, 2) for k in part.observations.keys} == {i}
        for key in set(part.observations.keys):  # a device's observations, in their order
            mine = [
                s
                for k, s in zip(part.observations.keys, part.observations.seq, strict=True)
                if k == key
            ]
            assert mine == [s for k, s in zip(keys, seq, strict=True) if k == key]


def test_a_partitioned_model_learns_every_sample_once_and_serves_windows(
    start_role, client_for, redis, settings
):
    plain, windowed = (Names(m, settings.topic_prefix, settings.key_prefix) for m in "pw")
    for role in ("ingest", "learner", "actor"):
        for names in (plain, windowed):
            start_role(role, TOML, names.model)

    device = client_for("p")
    messages = linear_messages(1200, seed=7)
    device.publish_samples(messages + messages[:3])  # three messages sent twice
    eventually(lambda: samples_seen(redis, plain) == 1200, 120, "each sample learned once")
    counts = [int(redis.get(plain.of_partition(i).ingest_count_key) or 0) for i in range(3)]
    assert sum(counts) == 1200 and min(counts) > 200, counts  # ~400 each
    reply = device.request({"x": [0.5, -0.5, 0.2]})
    assert "error" not in reply and reply["version"] > 0, reply

    devices = [f"dev-{d}" for d in range(6)]
    sensor = client_for("w", client_id="hub")
    sensor.publish_samples(sine_observations(devices, 100))
    windows = len(devices) * (100 - 2)  # each device's first two have no full window
    eventually(lambda: samples_seen(redis, windowed) == windows, 120, "every window learned")
    for d in devices:  # each device's window lives in its partition only
        home = windowed.of_partition(partition_of(d, 2)).stream_key(f"window:{d}")
        away = windowed.of_partition(1 - partition_of(d, 2)).stream_key(f"window:{d}")
        assert redis.zcard(home) > 0 and not redis.exists(away)
    assert {partition_of(d, 2) for d in devices} == {0, 1}
    for d in devices:  # a key-only request: its earlier steps come from its partition
        keyed = sensor.request({"key": d, "seq": 100, "x": [0.1]})
        assert "error" not in keyed and keyed["version"] > 0, keyed


def test_changing_the_partitions_with_samples_not_yet_learned_fails_at_start(
    start_role, client_for, redis, settings, tmp_path
):
    names = Names("p", settings.topic_prefix, settings.key_prefix)
    start_role("ingest", TOML, "p")  # three partitions
    client_for("p").publish_samples(linear_messages(300, seed=8))
    counts = [names.of_partition(i).ingest_count_key for i in range(3)]
    eventually(lambda: sum(int(redis.get(k) or 0) for k in counts) == 300, 30, "stored")

    two = tmp_path / "two.toml"
    two.write_text(TOML.replace("partitions = 3", "partitions = 2"))
    refused = launch_role(settings, "ingest", two, "p", instance="two")
    assert refused.proc.wait(60) != 0
    assert "ingest.partitions: 2 in the config" in refused.output
    assert "300 samples not learned yet" in refused.output

    start_role("learner", TOML, "p")  # works them off
    stream = open_stream(redis, names, parse_config(tomllib.loads(TOML)).model("p"))
    eventually(lambda: stream.backlog() == 0, 60, "learned and acknowledged")
    accepted = launch_role(settings, "ingest", two, "p", instance="two")
    try:
        accepted.wait_for(" ready")
    finally:
        accepted.stop()
    assert redis.get(names.key("ingest:partitions")) == b"2"
