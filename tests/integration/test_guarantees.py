"""One test per guarantee of the contract (docs/contract.md §4), each written so that it
fails when the guarantee is broken: `bench/mutants.py` plants each fault in a copy of the
repository and checks that these tests catch it. No test here waits on time for its
verdict; each waits (bounded) for a condition, or drives the loop step by step.
"""

from __future__ import annotations

import json
import threading
import urllib.request

import keras
import numpy as np
import paho.mqtt.client as paho
import pytest

from streamlearn.actor.loop import Actor
from streamlearn.config import ActorConfig, LearnerConfig, ModelConfig
from streamlearn.contract.names import Names
from streamlearn.contract.records import Samples
from streamlearn.learner.loop import Learner
from streamlearn.nn import networks
from streamlearn.online import codec, tensors
from streamlearn.online.numpy_model import NumpyModel
from streamlearn.stack.embedded import free_port
from streamlearn.store.stream import GROUP, SampleStream, unpack
from streamlearn.store.weights import WeightsStore
from tests.conftest import eventually

TOML = """
[models.g]
inputs = 2
task = "regression"
"""


# -- helpers ----------------------------------------------------------------------------


def stream_ids(redis, names: Names, shape: tuple[int, ...] = (2,)) -> list[str]:
    """Every sample id in the stream, repeats included."""
    return [
        i
        for _, f in redis.xrange(names.samples_key)
        for i in unpack(f, shape).ids or ()
        if i is not None
    ]


def scrape(port: int, name: str) -> float | None:
    """One unlabelled-but-model metric of a worker's /metrics; None when it is not there."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def samples_with_ids(prefix: str, n: int) -> dict:
    return {
        "x": [[i, 1.0] for i in range(n)],
        "y": [0.5] * n,
        "ids": [f"{prefix}{i}" for i in range(n)],
    }


def regression(**learner: object) -> ModelConfig:
    policy = {"max_batch": 16, "max_wait_ms": 5, "prefetch_batches": 0, **learner}
    return ModelConfig(
        name="r", inputs=3, task="regression", hidden=(8,), learner=LearnerConfig(**policy)
    )


def make_learner(redis, settings, cfg: ModelConfig, consumer: str = "t", **kw) -> Learner:
    names = Names(cfg.name, settings.topic_prefix, settings.key_prefix)
    queue = SampleStream(redis, names, cfg.sample_shape)
    store = WeightsStore(redis, names, keep=cfg.learner.history.newest)
    return Learner(cfg, queue, store, consumer=consumer, **kw)


def fill(queue: SampleStream, entries: int, per_entry: int = 1, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    batch = []
    for _ in range(entries):
        x = rng.uniform(-1, 1, (per_entry, 3)).astype(np.float32)
        batch.append(Samples(x, (x[:, 0] - 2 * x[:, 1]).astype(np.float32)))
    queue.write(batch, entry_each=True)
    return entries * per_entry


def train_all(learner: Learner, samples: int) -> None:
    """Train step by step (no durable point in between) until `samples` are learned."""
    for _ in range(samples + 10):  # bounded: each step takes at least one sample
        if learner.state.samples_seen >= samples:
            return
        batch = learner.drainer.drain(idle_block_ms=100)
        if batch is not None:
            learner.train_step(batch)
    raise AssertionError(f"trained {learner.state.samples_seen} of {samples} samples")


def sid(entry_id: bytes) -> tuple[int, int]:
    ms, seq = entry_id.split(b"-")
    return int(ms), int(seq)


def pending(redis, key: str, group: str = GROUP) -> int:
    return redis.xpending(key, group)["pending"]


# -- ingest: acknowledged only once in Redis -------------------------------------------


def test_ingest_killed_while_redis_refuses_writes_loses_no_sample(
    start_role, client_for, redis, settings
):
    """The broker forgets a message once ingest acknowledges it: acknowledged before it is
    in Redis, a crash loses it. Here Redis refuses every write (out of memory) while ingest
    holds the messages, ingest is killed with -9, and its restart (same id, same session)
    must get them again from the broker and store each once."""
    names = Names("g", settings.topic_prefix, settings.key_prefix)
    ingest = start_role("ingest", TOML, instance="a")
    # its one write at start done (the partition layout), every later one is the samples'
    eventually(lambda: redis.get(names.key("ingest:partitions")), 30, "ingest's layout")
    old = redis.config_get("maxmemory")["maxmemory"]
    redis.set(names.key("filler"), "x" * 4096)
    redis.config_set("maxmemory", 1)
    try:
        client_for("g").publish_samples([samples_with_ids("r", 3), samples_with_ids("s", 2)])
        # a few retries in: a PUBACK sent too early has long reached the broker by then
        eventually(lambda: "retry 3 in" in ingest.output, 30, "ingest retried its writes")
        ingest.proc.kill()
        ingest.proc.wait()
    finally:
        redis.config_set("maxmemory", old)
    start_role("ingest", TOML, instance="a")
    want = ["r0", "r1", "r2", "s0", "s1"]
    eventually(lambda: set(stream_ids(redis, names)) >= set(want), 20, "the samples redelivered")
    assert sorted(stream_ids(redis, names)) == want


def test_ingest_killed_while_holding_back_loses_no_sample(start_role, client_for, redis, settings):
    """Under back-pressure, ingest holds messages unacknowledged; killed then, its restart
    gets each of them from the broker."""
    names = Names("g", settings.topic_prefix, settings.key_prefix)
    port = free_port()
    held = TOML + "[models.g.ingest]\nmax_backlog_samples = 3\n"
    ingest = start_role("ingest", held, instance="b", env={"STREAMLEARN_METRICS_PORT": str(port)})
    device = client_for("g")
    device.publish_samples([samples_with_ids("a", 4)])  # over the limit: holding from now on
    eventually(lambda: "back-pressure on" in ingest.output, 30, "back-pressure on")
    device.publish_samples([samples_with_ids(f"h{m}-", 2) for m in range(5)])
    inbox = "streamlearn_ingest_inbox_messages"
    eventually(lambda: scrape(port, inbox) == 5, 30, "the held messages reached ingest")
    assert len(stream_ids(redis, names)) == 4, "held, not written"
    ingest.proc.kill()
    ingest.proc.wait()

    start_role("ingest", TOML, instance="b")  # a supervisor restarts it, with room to spare
    want = {f"h{m}-{i}" for m in range(5) for i in range(2)}
    eventually(lambda: set(stream_ids(redis, names)) >= want, 20, "the held samples redelivered")
    ids = stream_ids(redis, names)
    assert len(ids) == len(set(ids)) == 14


def test_a_redelivered_or_repeated_id_is_stored_once(start_role, client_for, redis, settings):
    names = Names("g", settings.topic_prefix, settings.key_prefix)
    start_role("ingest", TOML)
    first = samples_with_ids("d", 3)
    overlapping = {"samples": [{"x": [9, 9], "y": 1, "id": "d2"}, {"x": [8, 8], "y": 1, "id": "e"}]}
    device = client_for("g")
    device.publish_samples([first])
    eventually(lambda: int(redis.get(names.ingest_count_key) or 0) >= 3, 30, "first stored")
    # redelivered after it was stored (the seen ids), and repeated within one run
    device.publish_samples([first, first, overlapping, {"x": [1, 1], "y": 0}])
    eventually(lambda: int(redis.get(names.ingest_count_key)) >= 5, 30, "ingest wrote all")
    ids = stream_ids(redis, names)
    assert sorted(ids) == ["d0", "d1", "d2", "e"]
    assert int(redis.get(names.ingest_count_key)) == 5, "and one sample without an id"


# -- learner: acknowledged only once durable, trimmed, claimed -------------------------


@pytest.mark.parametrize("durable", ["checkpoint", "publish"])
def test_learner_acknowledges_entries_only_once_their_state_is_durable(
    redis, settings, tmp_path, durable
):
    policy: dict = {"publish": {"every_ms": 3_600_000, "every_steps": 10_000}}
    if durable == "checkpoint":
        policy["checkpoint"] = {"dir": str(tmp_path), "every_s": 3600, "every_samples": 10**6}
    learner = make_learner(redis, settings, regression(**policy))
    n = fill(learner.queue, 40)
    learner.start()
    train_all(learner, n)
    assert pending(redis, learner.queue.key) == 40, "learned, not durable: still pending"
    (learner.checkpoint if durable == "checkpoint" else learner.publish)()
    assert pending(redis, learner.queue.key) == 0


def test_the_stream_gets_shorter_but_never_below_a_lagging_group(redis, settings):
    learner = make_learner(redis, settings, regression())
    queue = learner.queue
    queue.ensure_group()
    redis.xgroup_create(queue.key, "learners:slow", id="0")
    n = fill(queue, 500)
    learner.start()
    learner.run(burst=True)
    assert learner.state.samples_seen == n and pending(redis, queue.key) == 0
    assert redis.xlen(queue.key) == 500, "the slow group has read nothing: nothing trimmed"

    rows = redis.xreadgroup("learners:slow", "s", {queue.key: ">"}, count=1000)[0][1]
    redis.xack(queue.key, "learners:slow", *[eid for eid, _ in rows[:250]])
    queue.trim()
    assert 250 <= redis.xlen(queue.key) < 500, "shorter, down to what the slow group needs"
    assert pending(redis, queue.key, "learners:slow") == 250
    oldest = redis.xrange(queue.key, count=1)[0][0]
    assert sid(oldest) <= sid(rows[250][0]), "the slow group's next entry is kept"
    redis.xack(queue.key, "learners:slow", *[eid for eid, _ in rows[250:]])
    queue.trim()
    assert redis.xlen(queue.key) < 250


def test_a_caught_up_learner_trims_what_it_acknowledged_last(redis, settings, tmp_path):
    # a full Redis frees memory only by trimming: the last acknowledged entries must go too
    policy = {"checkpoint": {"dir": str(tmp_path), "every_s": 0.05}}
    learner = make_learner(redis, settings, regression(**policy))
    key, stop = learner.queue.key, threading.Event()
    learner.start()
    runner = threading.Thread(target=learner.run, kwargs={"stop": stop})
    runner.start()
    try:
        fill(learner.queue, 20)
        eventually(lambda: redis.xlen(key) == 0, 20, "the first entries acknowledged, trimmed")
        fill(learner.queue, 20, seed=1)  # acknowledged within the trim's rate limit
        eventually(lambda: pending(redis, key) == 0, 20, "the next entries acknowledged")
        eventually(lambda: redis.xlen(key) == 0, 10, "and trimmed with no more to learn")
    finally:
        stop.set()
        runner.join(30)
    assert learner.state.samples_seen == 40


def test_a_new_learner_claims_what_a_dead_one_of_another_name_left_pending(redis, settings):
    """A learner on another host (another consumer name) takes over the entries a dead one
    read but never acknowledged, and learns them."""
    learner = make_learner(redis, settings, regression(), consumer="learner-host-2")
    queue = learner.queue
    queue.ensure_group()
    n = fill(queue, 30)
    rows = redis.xreadgroup(GROUP, "learner-host-1", {queue.key: ">"}, count=100)[0][1]
    ids = [eid for eid, _ in rows]
    redis.xclaim(queue.key, GROUP, "learner-host-1", 0, ids, idle=3_600_000)  # dead an hour
    learner.start()
    learner.run(burst=True)
    assert learner.state.samples_seen == n
    assert pending(redis, queue.key) == 0
    left = redis.xpending_range(queue.key, GROUP, "-", "+", 100, consumername="learner-host-1")
    assert left == []


def test_learner_does_not_retrace_for_any_batch_size(redis, settings):
    """Entries of 1 .. max_batch + 1 samples, each drained alone: every batch size."""
    learner = make_learner(redis, settings, regression())
    learner.start()
    warm = learner.probe.traces
    total = 0
    for n in range(1, learner.policy.max_batch + 2):
        total += fill(learner.queue, 1, per_entry=n, seed=n)
        train_all(learner, total)
    assert learner.probe.traces == warm
    assert learner.status()["retraces"] == 0


def test_status_is_refreshed_every_status_every_ms_while_learning(redis, settings):
    now = [1000.0]
    reports: list[tuple[float, dict]] = []
    learner = make_learner(
        redis,
        settings,
        regression(status_every_ms=500),
        status=lambda s: reports.append((now[0], s)),
        clock=lambda: now[0],
    )
    fill(learner.queue, 12, per_entry=16)
    learner.start()
    for _ in range(12):  # a step every 0.2 s of the learner's clock
        now[0] += 0.2
        assert learner.run(max_steps=1) == 1
    times = [1000.0] + [t for t, _ in reports]
    assert len(reports) >= 4
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) <= 0.5 + 0.2 + 1e-9
    assert reports[-1][1]["samples_seen"] >= 160


# -- back-pressure follows the base learner --------------------------------------------


def test_a_variant_far_behind_does_not_hold_back_ingest(redis, settings):
    names = Names("r", settings.topic_prefix, settings.key_prefix)
    queue = SampleStream(redis, names, (3,))
    queue.ensure_group()
    redis.xgroup_create(queue.key, "learners:wide", id="0")
    fill(queue, 100, per_entry=5)
    rows = redis.xreadgroup(GROUP, "base", {queue.key: ">"}, count=1000)[0][1]
    redis.xack(queue.key, GROUP, *[eid for eid, _ in rows])
    assert queue.appender.backlog() == 0
    written = queue.write(
        [Samples(np.zeros((7, 3), np.float32), np.zeros(7, np.float32))], backlog=True
    )
    assert written.backlog == 7, "what ingest measures: the base group's backlog"


# -- per-device windows expire ---------------------------------------------------------


def test_a_devices_window_expires_window_ttl_s_after_its_last_observation(
    start_role, client_for, redis, settings
):
    toml = """
[models.w]
inputs = 1
task = "regression"
architecture = "lstm"
window = 2
hidden = [4]
[models.w.ingest]
window_ttl_s = 2
"""
    names = Names("w", settings.topic_prefix, settings.key_prefix)
    key = names.key("window:dev-1")
    start_role("ingest", toml)
    device = client_for("w")
    device.publish_samples([{"key": "dev-1", "seq": 1, "x": [0.5]}])
    eventually(lambda: redis.exists(key) == 1, 30, "the observation stored")
    assert 0 < redis.pttl(key) <= 2000
    device.publish_samples([{"key": "dev-1", "seq": 2, "x": [0.5]}])
    eventually(lambda: redis.zcard(key) == 2, 30, "the second observation stored")
    assert 0 < redis.pttl(key) <= 2000
    eventually(lambda: redis.exists(key) == 0, 10, "the window expired")


# -- actors: no retrace, swap between batches, a reload never waits ---------------------

CALLS = {"n": 0}


class _CountCalls(keras.layers.Layer):
    """Counts the times Python runs the model's forward code: each trace, or each eager call."""

    def call(self, x):
        CALLS["n"] += 1
        return x


def counting_mlp(cfg: ModelConfig) -> keras.Model:
    """A model factory (`tests.integration.test_guarantees:counting_mlp`) that counts calls."""
    inputs = keras.Input(shape=cfg.sample_shape, name="x")
    h = keras.layers.Dense(4, activation="tanh", name="hidden")(_CountCalls()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1, name="out")(h), name=cfg.name)
    model.compile(optimizer="adam", loss="mse")
    return model


class Replies:
    """The actor's publish callback: what it would send to the broker."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def __call__(self, topic: str, payload: bytes, qos: int, retain: bool, props: object) -> None:
        if not retain:
            self.sent.append(json.loads(payload))

    def ids(self) -> list[object]:
        return [r["id"] for r in self.sent]


def make_actor(redis, settings, cfg: ModelConfig) -> tuple[Actor, WeightsStore, Replies]:
    names = Names(cfg.name, settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names)
    replies = Replies()
    return Actor(cfg, store, names, replies), store, replies


def publish_constant(store: WeightsStore, cfg: ModelConfig, version: int, value: float) -> None:
    """Every weight `value` (the input and target statistics left as they are, the
    identity): a linear model then predicts `value` for x = 0."""
    arrays = {
        k: v if "standardize" in k else np.full_like(v, value)
        for k, v in tensors.get_arrays(networks.build_model(cfg)).items()
    }
    assert store.publish(codec.encode(arrays, {"model": cfg.name})) == (version, True)


def request(actor: Actor, rows: int, rid: int) -> None:
    msg = paho.MQTTMessage(topic=actor.names.predict_topic.encode())
    msg.payload = json.dumps({"x": [[0.0, 0.0]] * rows, "id": rid}).encode()
    actor.on_message(None, None, msg)


def test_serving_never_traces_after_warm_up_for_any_batch_size(redis, settings):
    cfg = ModelConfig(
        name="c",
        inputs=3,
        task="regression",
        factory="tests.integration.test_guarantees:counting_mlp",
        actor=ActorConfig(max_batch=16),
    )
    actor, store, _ = make_actor(redis, settings, cfg)
    for version in (1, 2, 3):  # each served by another of the actor's three models
        publish_constant(store, cfg, version, 0.1 * version)
        actor.reloader.poll(block=True)
        actor.reload()
        assert actor.version == version
        warm = CALLS["n"]
        for n in range(1, cfg.actor.max_batch + 2):
            y = actor.predict(np.ones((n, 3), np.float32))
            assert y.shape == (n, 1) and np.isfinite(y).all()
        assert CALLS["n"] == warm, "the forward code ran again after warm-up"


def linear_cfg() -> ModelConfig:
    return ModelConfig(
        name="l",
        inputs=2,
        task="regression",
        architecture="linear",
        actor=ActorConfig(max_batch=16),
    )


def serving_v1_with_v2_staged(redis, settings) -> tuple[Actor, Replies]:
    """A linear actor serving version 1 (every weight 1.0) with version 2 (2.0) staged:
    the serving loop swaps it in before its next batch."""
    cfg = linear_cfg()
    actor, store, replies = make_actor(redis, settings, cfg)
    publish_constant(store, cfg, 1, 1.0)
    actor.reloader.poll(block=True)
    actor.reload()
    publish_constant(store, cfg, 2, 2.0)
    actor.reloader.poll(block=True)
    return actor, replies


def test_a_reply_names_the_version_whose_weights_computed_it(redis, settings):
    """A version staged while a batch waits is swapped in between batches, never inside
    one: each reply's `y` comes from the weights of the version it names."""
    actor, replies = serving_v1_with_v2_staged(redis, settings)
    for rid in range(3):
        request(actor, 3, rid)
    actor.serve(actor._gather(idle_s=1.0))
    actor.reload()
    request(actor, 1, 9)
    actor.serve(actor._gather(idle_s=1.0))
    assert [(r["id"], r["version"]) for r in replies.sent] == [(0, 1), (1, 1), (2, 1), (9, 2)]
    for r in replies.sent:
        ys = r["y"] if isinstance(r["y"], list) else [r["y"]]
        assert ys == pytest.approx([float(r["version"])] * len(ys)), r


def test_a_reload_in_progress_never_holds_up_a_batch(redis, settings, monkeypatch):
    """While the reload thread loads v3, the serving loop takes v2, staged before it, at
    once and answers with it. The load used to hold the lock that the swap needs, so the
    loop served v1 on: in bench.quality (a message every 100 ms, ~3 versions a message)
    linear4's second message was answered by the untrained v1 in 1 run of 4 (MAE 0.062
    against 0.033)."""
    actor, replies = serving_v1_with_v2_staged(redis, settings)
    loading, loaded, served = threading.Event(), threading.Event(), threading.Event()
    load = NumpyModel.load  # a linear model's actor serves it with numpy

    def slow_load(model: NumpyModel, arrays: dict) -> None:
        loading.set()
        loaded.wait(10)
        load(model, arrays)

    def one_batch() -> None:
        actor.reload()
        request(actor, 1, 5)
        actor.serve(actor._gather(idle_s=1.0))
        served.set()

    monkeypatch.setattr(NumpyModel, "load", slow_load)
    publish_constant(actor.reloader.store, linear_cfg(), 3, 3.0)
    poll = threading.Thread(target=actor.reloader.poll, daemon=True)
    poll.start()
    try:
        assert loading.wait(10), "the reload thread is loading v3"
        threading.Thread(target=one_batch, daemon=True).start()
        finished = served.wait(5)
    finally:
        loaded.set()
        poll.join(10)
    assert finished, "the batch waited for the load of v3"
    assert replies.sent == [{"id": 5, "y": [2.0], "version": 2, "model": "l", "variant": "base"}]
    actor.reload()
    assert actor.version == 3, "the version loaded meanwhile is taken at the next batch"
