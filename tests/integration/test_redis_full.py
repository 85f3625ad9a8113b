"""A full Redis (`maxmemory`, `noeviction`) kills no worker, and the stack recovers by itself.

Each test runs its own redis-server, so shrinking its memory leaves other tests alone; the
learner and ingest are real processes, and afterwards the same processes, still alive.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import redis as redis_lib

from streamlearn.contract.names import Names
from streamlearn.stack import embedded
from tests.conftest import eventually, plain_paho
from tests.conftest import published as published_meta

MODEL = "full"
TOML = """
[models.full]
inputs = 4
task = "regression"
hidden = [8]

[models.full.learner]
max_batch = 64
buckets = [64]  # one padded size: one trace before ready (batch sizes are not this test's)
max_wait_ms = 5
publish.every_ms = 100
status_every_ms = 200
retry_max_ms = 300
{extra}
"""


@pytest.fixture
def own_redis(tmp_path) -> Iterator[redis_lib.Redis]:
    """A redis-server of the test's own. A test names it before `start_role`, so that its
    workers stop first, as a deployment stops them (with no Redis to reach, a learner
    spends its retries, seconds, on the way out)."""
    with embedded.redis_server(workdir=tmp_path / "redis") as server:
        client = redis_lib.Redis(port=server.port)
        client.config_set("maxmemory-policy", "noeviction")
        yield client
        client.close()


class Status:
    """The learner's retained status, as a dashboard sees it."""

    def __init__(self, settings, names: Names) -> None:
        self.last: dict = {}
        self._lock = threading.Lock()
        self.client = plain_paho(settings)
        self.client.on_message = self._on_message
        self.client.subscribe(names.status_topic, qos=1)

    def _on_message(self, _c, _u, msg) -> None:
        with self._lock:
            self.last = json.loads(msg.payload)

    def get(self, key: str, default=None):
        with self._lock:
            return self.last.get(key, default)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def messages(start: int, count: int, per: int = 10, ids: bool = True) -> list[dict]:
    """`count` messages of `per` samples, each sample with its own id (if `ids`)."""
    rng = np.random.default_rng(start)
    out = []
    for m in range(start, start + count):
        x = rng.uniform(-1, 1, (per, 4)).round(4)
        y = x @ np.array([1.0, -2.0, 0.5, 0.0])
        out.append({"x": x.tolist(), "y": y.round(4).tolist()})
        if ids:
            out[-1]["ids"] = [f"s{m}-{i}" for i in range(per)]
    return out


def published(client: redis_lib.Redis, names: Names) -> tuple[int, int]:
    """The latest version and the samples its learner had seen."""
    latest, meta = published_meta(client, names)
    return latest, int(meta.get("samples_seen", 0))


def oom_refusals(client: redis_lib.Redis) -> int:
    return int(client.info("errorstats").get("errorstat_OOM", {}).get("count", 0))


@contextlib.contextmanager
def explained(client: redis_lib.Redis, names: Names, *procs) -> Iterator[None]:
    """On a failed wait, say where things stood: memory, keys, the processes' last lines."""
    try:
        yield
    except AssertionError as exc:
        keys = {k.decode(): client.memory_usage(k, samples=0) for k in client.scan_iter(count=1000)}
        memory = client.info("memory")
        where = [
            f"used_memory {memory['used_memory']}, maxmemory {memory['maxmemory']}",
            f"{client.xlen(names.samples_key)} entries",
            *(
                f"client {c['name'] or c['id']}: tot-mem {c['tot-mem']} qbuf {c['qbuf']} "
                f"omem {c['omem']} cmd {c['cmd']}"
                for c in client.client_list()
            ),
            f"published (version, samples_seen) {published(client, names)}",
            f"keys {keys}",
            *("\n".join(p.lines[-15:]) for p in procs),
        ]
        raise AssertionError("\n".join([str(exc), *where])) from None


def start_stack(start_role, own_redis, extra: str = ""):
    env = {
        "STREAMLEARN_REDIS_URL": f"redis://127.0.0.1:{own_redis.connection_pool.connection_kwargs['port']}/0"
    }
    toml = TOML.format(extra=extra)
    return start_role("learner", toml, env=env), start_role("ingest", toml, env=env)


def test_learner_and_ingest_outlive_a_full_redis_and_learn_every_sample_once(
    own_redis, start_role, settings, client_for
):
    """No checkpoint: entries are acknowledged with a published version, which a full
    Redis refuses; once memory is raised, everything flows again, nothing restarted."""
    names = Names(MODEL, settings.topic_prefix, settings.key_prefix)
    learner, ingest = start_stack(start_role, own_redis)
    status = Status(settings, names)
    device = client_for(MODEL)
    try:
        device.publish_samples(messages(0, 20))
        eventually(lambda: published(own_redis, names)[1] == 200, 60, "the first samples learned")
        before, _ = published(own_redis, names)

        # Full: room for a few hundred more samples, then every write that takes memory is
        # refused. The flood fills it; the learner trains what got in, and cannot publish.
        own_redis.config_set("maxmemory", own_redis.info("memory")["used_memory"] + 64 * 1024)
        flood = messages(20, 400)
        device.publish_samples(flood)  # QoS 1: the broker holds what ingest cannot write
        eventually(lambda: status.get("redis_oom") is True, 60, "the learner reports redis_oom")
        assert status.get("redis_failures", {}).get("publish", 0) >= 1
        eventually(lambda: "maxmemory" in ingest.output, 30, "ingest refused by the full Redis")
        stuck = int(own_redis.get(names.ingest_count_key) or 0)
        assert stuck < 200 + 4000, "Redis was full before the flood was in"
        assert learner.proc.poll() is None and ingest.proc.poll() is None

        own_redis.config_set("maxmemory", 0)  # memory is back
        total = 200 + 4000
        eventually(lambda: published(own_redis, names)[1] == total, 120, "all samples learned")
        eventually(lambda: status.get("redis_oom") is False, 30, "the learner reports it gone")
    finally:
        status.close()
    assert int(own_redis.get(names.ingest_count_key)) == total, "each sample appended once"
    version, seen = published(own_redis, names)
    assert seen == total and version > before, "learned once each, in new versions"
    group = own_redis.xinfo_groups(names.samples_key)[0]
    assert group["pending"] == 0 and group["lag"] == 0
    assert own_redis.xlen(names.deadletter_key) == 0
    assert learner.proc.poll() is None and ingest.proc.poll() is None, "same processes, alive"
    assert "Traceback" not in learner.output + ingest.output
    assert "lease" not in learner.output.split("taken as", 1)[1], "one lease, kept throughout"


def test_a_full_redis_frees_itself_when_the_learner_checkpoints(
    own_redis, start_role, settings, client_for, tmp_path
):
    """With checkpoints, the learner acknowledges and trims while Redis is full: memory
    frees itself, and ingest goes on without anyone raising maxmemory."""
    names = Names(MODEL, settings.topic_prefix, settings.key_prefix)
    # The ids ingest remembers to drop duplicates take memory too, for dedup_window_s.
    extra = f"""checkpoint.dir = "{tmp_path / "ckpt"}"
checkpoint.every_s = 0.2
[models.full.ingest]
dedup_window_s = 5
"""
    learner, ingest = start_stack(start_role, own_redis, extra)
    device = client_for(MODEL)
    device.publish_samples(messages(0, 5))
    eventually(lambda: published(own_redis, names)[1] == 50, 60, "the first samples learned")
    # Room for a part of what comes (ingest writes a refused run in smaller pieces).
    limit = own_redis.info("memory")["used_memory"] + 512 * 1024
    own_redis.config_set("maxmemory", limit)
    device.publish_samples(messages(5, 3_000, per=4))
    total = 50 + 12_000
    with explained(own_redis, names, learner, ingest):
        eventually(lambda: published(own_redis, names)[1] == total, 180, "all samples learned")
    assert oom_refusals(own_redis) > 0, "Redis was full on the way"
    assert int(own_redis.config_get("maxmemory")["maxmemory"]) == limit, "nobody raised it"
    assert int(own_redis.get(names.ingest_count_key)) == total
    assert learner.proc.poll() is None and ingest.proc.poll() is None, "same processes, alive"
    assert "lost" not in learner.output, "the learner kept its lease (it trims only holding it)"


def test_a_run_partly_refused_for_lack_of_memory_stores_each_sample_once(
    own_redis, start_role, settings, client_for
):
    """A run's pipeline holds many script calls (2,000 samples each), of which a full Redis
    takes some and refuses the rest; the run is written again in smaller pieces, each
    without what Redis took. Samples without ids (nothing de-duplicates them) show that
    none is appended twice. No learner: only raising maxmemory frees room."""
    names = Names(MODEL, settings.topic_prefix, settings.key_prefix)
    env = {
        "STREAMLEARN_REDIS_URL": f"redis://127.0.0.1:{own_redis.connection_pool.connection_kwargs['port']}/0"
    }
    ingest = start_role("ingest", TOML.format(extra=""), env=env)
    pid = ingest.proc.pid
    device = client_for(MODEL)
    device.publish_samples(messages(0, 5, per=100, ids=False))

    def stored() -> int:  # samples appended
        return int(own_redis.get(names.ingest_count_key) or 0)

    eventually(lambda: stored() == 500, 30, "the first samples stored")
    # No room: the messages gather in ingest's inbox while it retries the first of them.
    used = own_redis.info("memory")["used_memory"]
    own_redis.config_set("maxmemory", 1)
    device.publish_samples(messages(5, 30, per=2000, ids=False))
    with explained(own_redis, names, ingest):
        eventually(lambda: "retry 5 " in ingest.output, 60, "ingest refused by the full Redis")
    # Room for ~6 messages of 2,000 samples (40 kB each, a script call each): the next run
    # holds the other 29 in one pipeline, and Redis takes its first calls only.
    own_redis.config_set("maxmemory", used + 256 * 1024)
    with explained(own_redis, names, ingest):
        eventually(lambda: "at a time" in ingest.output, 60, "a refused run written in pieces")
    assert stored() < 60_500, "Redis was full before all were in"
    own_redis.config_set("maxmemory", own_redis.info("memory")["used_memory"] + 4 * 1024**2)
    with explained(own_redis, names, ingest):
        eventually(lambda: stored() >= 60_500, 60, "every message stored")
    time.sleep(0.5)  # a sample appended twice would show now
    assert stored() == 60_500, "each sample appended once"
    n = sum(int(f[b"n"]) for _, f in own_redis.xrange(names.samples_key))
    assert n == 60_500, "the entries hold each sample once"
    assert own_redis.xlen(names.deadletter_key) == 0, "a full Redis is no message's fault"
    assert ingest.proc.pid == pid and ingest.proc.poll() is None, "the same ingest, alive"
    assert "Traceback" not in ingest.output
