"""The learner against a real Redis: padding, test-then-train, traces, guards, resume."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamlearn.config import LearnerConfig, ModelConfig
from streamlearn.contract.names import Names
from streamlearn.contract.records import Samples
from streamlearn.errors import WeightsError
from streamlearn.learner.batching import samples_batch
from streamlearn.learner.loop import Learner
from streamlearn.learner.state import CheckpointDir
from streamlearn.nn import networks
from streamlearn.observe.metrics import SnapshotCollector
from streamlearn.online import codec, tensors
from streamlearn.online.batch import padded
from streamlearn.online.guard import TrainProbe
from streamlearn.store.stream import GROUP, SampleStream
from streamlearn.store.weights import WeightsStore
from tests.factories import deadletters


def regression(**learner: object) -> ModelConfig:
    return ModelConfig(
        name="r",
        inputs=3,
        task="regression",
        hidden=(8,),
        learner=LearnerConfig(**{"max_batch": 16, "max_wait_ms": 5, **learner}),
    )


def make_learner(redis, settings, cfg: ModelConfig, consumer: str = "t") -> Learner:
    names = Names(cfg.name, settings.topic_prefix, settings.key_prefix)
    queue = SampleStream(redis, names, cfg.sample_shape)
    store = WeightsStore(redis, names, keep=cfg.learner.history.newest)
    return Learner(cfg, queue, store, consumer=consumer)


def fill(learner: Learner, entries: int, per_entry: int = 1, seed: int = 0) -> int:
    """Entries of `per_entry` samples of y = x0 - 2 x1 + 0.5 x2; returns the sample count."""
    rng = np.random.default_rng(seed)
    batch = []
    for _ in range(entries):
        x = rng.uniform(-1, 1, (per_entry, 3)).astype(np.float32)
        batch.append(Samples(x, (x[:, 0] - 2 * x[:, 1] + 0.5 * x[:, 2]).astype(np.float32)))
    learner.queue.write(batch, entry_each=True)
    return entries * per_entry


def group(learner: Learner) -> dict:
    return learner.queue.redis.xinfo_groups(learner.queue.key)[0]


def test_padding_weights_make_the_batch_mean_exact():
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    batch = padded([x[:2], x[2:]], [np.ones(2), np.full(3, 2.0)], (4, 16, 64), (1,))
    assert (batch.n, len(batch.x), batch.y.shape) == (5, 16, (16, 1))
    np.testing.assert_array_equal(batch.x[:5], x)
    assert not batch.x[5:].any() and not batch.w[5:].any()
    assert batch.w[:5].sum() == pytest.approx(16)  # sum(w * loss) / 16 == mean over the 5


def test_each_batch_is_scored_with_the_weights_before_it_is_learned(redis, settings):
    # The step alone: the input statistics' first update would also change what x means
    # (the statistics learned after the step: tests/integration/test_learning.py). One
    # head: a hedge model's loss is its heads' mean loss, not the served prediction's.
    cfg = regression().model_copy(update={"standardize": False, "heads": "last"})
    learner = make_learner(redis, settings, cfg)
    fill(learner, 5)
    learner.start()
    rows = redis.xrange(learner.queue.key)
    x = np.stack([np.frombuffer(f[b"x"], np.float32) for _, f in rows])
    y = np.concatenate([np.frombuffer(f[b"y"], np.float32) for _, f in rows])
    before = learner.model.predict_on_batch(x).reshape(-1)

    assert learner.run(max_steps=1) == 1
    status = learner.status()
    assert status["samples_seen"] == 5 and status["metric"] == "mae"
    assert status["online_loss"] == pytest.approx(np.mean((before - y) ** 2), rel=1e-4)
    assert status["online_metric"] == pytest.approx(np.mean(np.abs(before - y)), rel=1e-4)
    after = learner.model.predict_on_batch(x).reshape(-1)
    assert np.mean((after - y) ** 2) < np.mean((before - y) ** 2), "then it learned"


def test_trace_counter_counts_real_traces():
    model = networks.build_model(regression())
    probe = TrainProbe(model)
    for size, new_trace in ((8, True), (8, False), (8, False), (3, True)):
        traces = probe.traces
        model.train_on_batch(np.zeros((size, 3)), np.zeros((size, 1)))
        assert (probe.traces > traces) is new_trace, size


def test_each_steps_figures_are_its_batchs_alone_as_with_kerass_own_reset():
    """The probed step zeroes the metrics itself (no eager reset per `train_on_batch`):
    the loss and metric of every step are still those of its batch alone."""
    cfg = ModelConfig(name="b", inputs=3, task="binary", hidden=(8,))
    probed, plain = networks.build_model(cfg), networks.build_model(cfg)
    TrainProbe(probed)
    plain.set_weights(probed.get_weights())
    rng = np.random.default_rng(3)
    for n in (64, 16, 64, 16, 64):
        x = rng.normal(size=(n, 3)).astype(np.float32)
        y = (x[:, :1] > 0).astype(np.float32)
        got = probed.train_on_batch(x, y, return_dict=True)
        expected = plain.train_on_batch(x, y, return_dict=True)
        assert got["loss"] == pytest.approx(expected["loss"], rel=1e-5)
        assert got["binary_accuracy"] == pytest.approx(expected["binary_accuracy"], rel=1e-6)


def test_no_retrace_after_warm_up_whatever_the_drained_size(redis, settings):
    learner = make_learner(redis, settings, regression(max_batch=100))
    learner.start()
    assert learner.buckets == (16, 64, 100) and learner.status()["traces"] >= 1
    rng = np.random.default_rng(1)
    sizes = [*range(1, 101), *rng.integers(1, 101, 50).tolist()]
    for n in sizes:
        x = rng.normal(size=(n, 3)).astype(np.float32)
        learner.train_step(samples_batch(Samples(x, x[:, 0]), learner.buckets))
    assert learner.status()["retraces"] == 0
    assert learner.state.samples_seen == sum(sizes)
    scraped = {
        m.name: m.samples[0].value
        for m in SnapshotCollector("learner", "r", learner.metrics).collect()
    }
    assert scraped["streamlearn_learner_retraces"] == 0  # a counter: *_total
    assert scraped["streamlearn_learner_samples"] == sum(sizes)  # a counter: *_total


def test_a_new_learners_first_samples_wait_for_no_trace_and_are_published_before_one(
    redis, settings
):
    """A backlog at start (a device's samples sent while the learner imported TensorFlow):
    the first step takes what the traced step holds, at once; the version with it is out
    before the next bucket is traced (seconds), and then the batches grow."""
    learner = make_learner(redis, settings, regression(max_batch=64, publish={"every_steps": 1000}))
    fill(learner, 50)
    learner.start()
    assert learner.store.latest_version() == 1  # the initial weights, before any trace
    assert learner.status()["traces_pending"] == 2  # bucket 64, the stacked replay steps
    traces_at_publish = []
    publish = learner.durability.publish
    learner.durability.publish = lambda **kw: (
        traces_at_publish.append(learner.probe.traces),
        publish(**kw),
    )
    traced = learner.probe.traces

    assert learner.run(max_steps=1) == 1  # 16 of the 50: the traced step's size
    assert learner.state.samples_seen == 16
    assert learner.store.metadata(2)[1]["samples_seen"] == "16"
    assert traces_at_publish[0] == traced  # published before bucket 64 was traced
    assert learner.status()["traces_pending"] == 1 and learner.probe.traces == traced + 1
    assert learner.run(max_steps=1) == 1
    assert learner.state.samples_seen == 50  # the other 34 at once, in the new bucket


def test_bad_samples_are_dead_lettered_and_never_published(redis, settings):
    # history.newest: every version stays readable; publish after every step.
    cfg = regression(max_batch=8, publish={"every_steps": 1}, history={"newest": 1000})
    learner = make_learner(redis, settings, cfg)
    rng = np.random.default_rng(2)
    bad = {3: ("x", np.nan), 6: ("y", np.inf), 9: ("x", 1e30), 12: ("y", 1e30), 15: ("x", 1e15)}
    for i in range(20):  # entries of 8 samples, one per step; the bad ones bypassed ingest
        x = rng.uniform(-1, 1, (8, 3)).astype(np.float32)
        y = x.sum(axis=1)
        if i in bad:
            field, value = bad[i]
            (x[:, 1] if field == "x" else y)[4] = value
        learner.queue.write([Samples(x, y)])
    redis.xadd(learner.queue.key, {"n": 2, "x": b"short", "y": b""})  # undecodable
    learner.start()
    learner.run(burst=True)

    latest = learner.store.latest_version()
    assert latest >= 15
    for version in range(1, latest + 1):
        arrays, _ = codec.decode(learner.store.fetch(version)[1])
        assert all(np.isfinite(a).all() for a in arrays.values()), version
    status = learner.status()
    # NaN, inf and 1e30 labels always blow up; a huge x may meet only dead ReLUs (harmless).
    assert 3 <= status["rollbacks"] <= 5
    assert status["dead_lettered"] == 8 * status["rollbacks"]
    assert status["samples_seen"] == 20 * 8 - status["dead_lettered"], "the rest trained"
    letters = deadletters(redis, learner.queue.names)
    assert all(d["source"] == "learner" for d in letters)
    assert sum("non-finite" in d["reason"] for d in letters) == status["rollbacks"]
    assert sum("unusable stream entry" in d["reason"] for d in letters) == 1
    assert all(json.loads(d["payload"])["entries"] for d in letters), "they name the entries"
    assert group(learner)["pending"] == 0 and group(learner)["lag"] == 0


def test_entries_read_ahead_are_trained_after_a_restart(redis, settings):
    cfg = regression(prefetch_batches=2)
    first = make_learner(redis, settings, cfg, consumer="learner-r")
    total = fill(first, 400)
    first.start()
    first.run(max_steps=3)  # reads ahead, trains 3 batches, publishes them
    assert first.state.samples_seen == 48
    g = group(first)
    assert g["pending"] > 0 and g["entries-read"] > 48, "read ahead but not acknowledged"

    second = make_learner(redis, settings, cfg, consumer="learner-r")
    second.start()
    second.run(burst=True)
    assert second.state.samples_seen == total, "each sample trained once in the lineage"
    assert group(second)["pending"] == 0 and group(second)["lag"] == 0
    assert second.state.version > first.state.version


def test_a_read_sent_ahead_when_a_run_stops_is_trained_by_the_next_run(redis, settings):
    """Under a backlog the next read goes out while a batch trains: a run that stops then
    keeps what Redis delivered for the next run, and acknowledges what it made durable."""
    learner = make_learner(redis, settings, regression(prefetch_batches=0))
    total = fill(learner, 400)
    learner.start()
    learner.run(max_steps=5)
    g = group(learner)
    assert g["entries-read"] > 5 * 16, "read beyond what it trained"
    assert g["pending"] == g["entries-read"] - 5 * 16, "the last publish's entries acknowledged"
    learner.run(burst=True)
    assert learner.state.samples_seen == total, "each sample trained once"
    assert group(learner)["pending"] == 0 and group(learner)["lag"] == 0


def test_resumes_from_its_checkpoint_with_optimizer_state(redis, settings, tmp_path):
    cfg = regression(checkpoint={"dir": str(tmp_path), "every_s": 1000})
    learner = make_learner(redis, settings, cfg)
    fill(learner, 100)
    learner.start()
    learner.run(max_steps=4)  # exits with a last publish and checkpoint
    saved = CheckpointDir(tmp_path / "r").load()
    assert saved.state["step"] == 4 and saved.state["version"] == learner.state.version
    g = group(learner)
    assert g["pending"] == g["entries-read"] - 64, "the checkpoint acknowledged what it covers"

    resumed = make_learner(redis, settings, cfg)
    resumed.start()
    assert (resumed.state.step, resumed.state.samples_seen) == (4, 64)
    names = tensors.training_names(resumed.model)
    assert any(name.startswith("optimizer/") and "velocity" in name for name in names)
    values = tensors.snapshot(tensors.training_variables(resumed.model))
    # the configured learning rate wins over the saved one (the step size, which follows
    # the recent loss, may have moved it before the checkpoint: it starts over)
    saved.arrays["optimizer/learning_rate"] = np.float32(cfg.learning_rate)
    for name, value in zip(names, values, strict=True):
        np.testing.assert_array_equal(value, saved.arrays[name], name)
    resumed.run(max_steps=1)
    assert resumed.state.version > learner.state.version


def test_checkpoint_file_is_atomic_and_safe(tmp_path):
    ckpt = CheckpointDir(tmp_path / "m")
    assert ckpt.load() is None
    ckpt.save({"w": np.ones((2, 2), np.float32), "it": np.array(3, np.int64)}, {"step": 7})
    (tmp_path / "m" / ".checkpoint.safetensors.1.tmp").write_bytes(b"half-written")
    loaded = ckpt.load()
    assert loaded.state == {"step": 7} and int(loaded.arrays["it"]) == 3
    blob = ckpt.path.read_bytes()
    header = json.loads(blob[8 : 8 + int.from_bytes(blob[:8], "little")])
    assert header["w"]["dtype"] == "F32", "the safetensors layout, readable without pickle"
    ckpt.path.write_bytes(b"\x00" * 16)
    with pytest.raises(WeightsError):
        ckpt.load()


def test_unusable_checkpoint_is_ignored(redis, settings, tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "checkpoint.safetensors").write_bytes(b"not a checkpoint at all")
    learner = make_learner(redis, settings, regression(checkpoint={"dir": str(tmp_path)}))
    fill(learner, 20)
    learner.start()
    assert learner.run(max_steps=2) == 2 and learner.state.samples_seen == 20
    assert CheckpointDir(tmp_path / "r").load().state["samples_seen"] == 20


def test_pending_entries_are_all_read_back(redis, settings):
    learner = make_learner(redis, settings, regression())
    fill(learner, 2500)
    learner.queue.ensure_group()
    assert len(learner.queue.read("gone", 2500, None)) == 2500
    assert len(learner.queue.pending("gone", count=1000)) == 2500
    assert len(learner.queue.claim_stale("new", 0, count=1000)) == 2500
    assert redis.xpending(learner.queue.key, GROUP)["consumers"][0]["name"] == b"new"
