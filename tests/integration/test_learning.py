"""How much the service learns per sample: standardisation, replay, drift (issue 13).

The end-to-end test runs the real stack (Mosquitto, Redis, ingest, learner and actor
processes) with default settings, as a new user would.
"""

from __future__ import annotations

import threading
import time

import keras
import numpy as np
import pytest

import streamlearn
from streamlearn.config import LearnerConfig, LearningConfig, ModelConfig
from streamlearn.contract.names import Names
from streamlearn.contract.records import Samples
from streamlearn.learner.loop import Learner
from streamlearn.learner.step import build_trainer
from streamlearn.nn import networks
from streamlearn.online import codec, standardize, tensors
from streamlearn.online.batch import padded
from streamlearn.online.drift import DriftDetector
from streamlearn.online.replay import Replay
from streamlearn.online.trainer import Trainer
from streamlearn.store.stream import SampleStream
from streamlearn.store.weights import WeightsStore
from tests.conftest import eventually, settled

LINEAR = np.array([1.5, -2.0, 0.5, 3.0], np.float32)
# Steps of 40 samples fill the bucket of 64: the default's 256, traced at warm-up (seconds)
# and never used, is left out. The steps are the same (a warm-up trace's effects are undone).
FILLS_64 = LearnerConfig(max_batch=64)


def linear_samples(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw, unscaled inputs (offsets and spreads far from 0 and 1), a noise-free target."""
    x = np.random.default_rng(seed).normal(0, 1, (n, 4)) * [1, 10, 0.1, 3] + [0, 5, 0, -2]
    x = x.astype(np.float32)
    return x, ((x - [0, 5, 0, -2]) / [1, 10, 0.1, 3] @ LINEAR).astype(np.float32)


def test_default_settings_learn_a_linear_function_from_2500_samples(start_role, settings, redis):
    """2,500 samples in 40-sample messages, then predictions on fresh points through an
    actor: each sample gave more than the one step of 256 it would have had."""
    toml = '[models.lin]\ninputs = 4\ntask = "regression"\n'
    for role in ("ingest", "learner", "actor"):
        start_role(role, toml, instance=role)
    x, y = linear_samples(2500, seed=0)
    fresh_x, fresh_y = linear_samples(200, seed=1)
    names = Names("lin", settings.topic_prefix, settings.key_prefix)
    with streamlearn.Client(settings.mqtt, topic_prefix=settings.topic_prefix) as client:
        for i in range(0, 2500, 40):
            client.publish_many("lin", x[i : i + 40], y[i : i + 40])
        eventually(
            lambda: settled(settings, redis, names, 2500),
            120,
            "the learner trained on every sample, replayed them and published what it learned",
        )
        latest = int(redis.get(names.latest_key))
        eventually(
            lambda: client.predict("lin", fresh_x[:1].tolist()).version >= latest,
            30,
            "the actor serves the weights published after the replay",
        )
        got = np.array(client.predict("lin", fresh_x.tolist(), timeout=10).y).reshape(-1)
    mae = float(np.mean(np.abs(got - fresh_y)))
    assert mae < 0.1, f"mean absolute error on fresh points {mae:.3f} (target spread {y.std():.2f})"


def test_the_actor_answers_what_the_learners_model_computes(start_role, settings, redis):
    """Standardisation is part of the model: the actor applies exactly the statistics the
    learner learned (of the inputs and of the target), so a reply equals the learner's own
    forward pass."""
    cfg = ModelConfig(name="same", inputs=4, hidden=(8,))
    names = Names("same", settings.topic_prefix, settings.key_prefix)
    learner = Learner(cfg, SampleStream(redis, names, cfg.sample_shape), WeightsStore(redis, names))
    learner.start()
    x, y = linear_samples(300, seed=2)
    learner.queue.write([Samples(x[i : i + 30], y[i : i + 30]) for i in range(0, 300, 30)])
    learner.run(burst=True)
    scaler = learner.model.get_layer("standardize")
    assert np.allclose(scaler.mean.numpy(), x.mean(axis=0), rtol=1e-3, atol=1e-3)
    target = learner.model.get_layer("unstandardize")
    assert np.allclose(target.mean.numpy(), y.mean(), rtol=1e-3, atol=1e-3)
    start_role("actor", "[models.same]\ninputs = 4\nhidden = [8]\n")
    probe = linear_samples(5, seed=3)[0]
    with streamlearn.Client(settings.mqtt, topic_prefix=settings.topic_prefix) as client:
        reply = client.predict("same", probe.tolist())
    assert reply.version == learner.state.version
    expected = learner.model.predict_on_batch(probe).reshape(-1)
    assert np.allclose(np.array(reply.y).reshape(-1), expected, rtol=1e-5, atol=1e-6)
    published = codec.decode(WeightsStore(redis, names).fetch()[1])[0]
    assert np.allclose(published["standardize/mean"], scaler.mean.numpy())


def early_error(cfg: ModelConfig, x: np.ndarray, y: np.ndarray) -> float:
    """Test-then-train in 40-sample messages (each replayed as the budget allows): the
    mean absolute error of the predictions for samples 40 to 200, relative to y's spread."""
    trainer = build_trainer(cfg, deadletter=lambda *_: None)
    trainer.warm_up()
    errors = []
    for i in range(0, 200, 40):
        part_x, part_y = x[i : i + 40], y[i : i + 40]
        errors.append(np.abs(trainer.model.predict_on_batch(part_x).reshape(-1) - part_y))
        trainer.step(padded([part_x], [part_y], trainer.buckets, (1,)))
        while trainer.replay_step():
            pass
    return float(np.concatenate(errors[1:]).mean() / y.std())


def test_a_target_in_the_hundreds_is_learned_as_fast_as_one_near_zero():
    """The regression's last layer scales by the target's running moments: a target of
    ~150 +- 320 costs no more samples than one near zero. Without it, the predictions of
    the first few hundred samples were off by ~40% of the target's spread (Adam's steps of
    ~0.01 have a long way to go to reach the target's level)."""
    cfg = ModelConfig(name="big", inputs=4, learner=FILLS_64)
    x, y = linear_samples(200, seed=5)
    near_zero = early_error(cfg, x, y)
    big = early_error(cfg, x, y * 80 + 150)
    assert big < 1.5 * near_zero + 0.02, f"relative error {big:.3f}, near zero {near_zero:.3f}"


def test_replay_buffer_stays_bounded_and_within_its_budget():
    replay = Replay(1000, (4,), (1,), ratio=3, batch=16, buckets=(16, 64, 256))
    size = replay.nbytes
    for seed in range(50):
        x, y = linear_samples(256, seed)
        replay.add(x, y.reshape(-1, 1))
        while replay.due():
            replay.sample()
    assert replay.size == 1000 and replay.nbytes == size == 1000 * (4 + 1) * 4
    assert 3 * 12_800 - 16 <= replay.replayed <= 3 * 12_800
    newest_x = x[-100:]
    replay.keep_newest(100)
    assert replay.size == 100
    assert {tuple(r) for r in replay.sample().x} <= {tuple(r) for r in newest_x}


def test_a_sample_counts_once_in_the_online_metric(redis, settings):
    """Replayed steps train but are never scored: samples seen and the online window
    count each sample once, however often it was replayed."""
    cfg = ModelConfig(
        name="once",
        inputs=4,
        learner=LearnerConfig(prefetch_batches=0),
        learning=LearningConfig(replay_ratio=8),
    )
    names = Names("once", settings.topic_prefix, settings.key_prefix)
    learner = Learner(cfg, SampleStream(redis, names, (4,)), WeightsStore(redis, names))
    learner.start()
    x, y = linear_samples(400, seed=4)
    learner.queue.write([Samples(x[i : i + 40], y[i : i + 40]) for i in range(0, 400, 40)])
    stop = threading.Event()
    worker = threading.Thread(target=learner.run, args=(stop,))
    worker.start()
    try:
        eventually(
            lambda: learner.state.samples_seen == 400 and not learner.trainer.replay.due(),
            60,
            "every sample trained, the replay budget spent",
        )
    finally:
        stop.set()
        worker.join()
    status = learner.status()
    assert status["replayed_samples"] >= 8 * 400 - 16 and status["replay_steps"] > 100
    assert status["samples_seen"] == 400 and status["window_samples"] == 400


def test_a_backlog_is_worked_off_before_any_replay(redis, settings):
    """Replay takes spare time only: with samples waiting in the stream, every step is a
    fresh one, even while the read-ahead is behind (reads from a distant Redis, here 5 ms
    each); once caught up, the learner replays."""

    class DistantStream(SampleStream):
        def read_packed(self, *args, **kwargs):
            time.sleep(0.005)
            return super().read_packed(*args, **kwargs)

    cfg = ModelConfig(name="busy", inputs=4, learner=LearnerConfig(max_batch=64))
    names = Names("busy", settings.topic_prefix, settings.key_prefix)
    learner = Learner(cfg, DistantStream(redis, names, (4,)), WeightsStore(redis, names))
    learner.start()
    x, y = linear_samples(3000, seed=6)
    learner.queue.write([Samples(x[i : i + 40], y[i : i + 40]) for i in range(0, 3000, 40)])
    replayed_before_caught_up = []
    step = learner.train_step

    def fresh_step(batch) -> None:
        step(batch)
        if learner.state.samples_seen >= 3000:
            replayed_before_caught_up.append(learner.trainer.replay_steps)

    learner.train_step = fresh_step
    stop = threading.Event()
    worker = threading.Thread(target=learner.run, args=(stop,))
    worker.start()
    try:
        eventually(lambda: learner.trainer.replay_steps > 0, 60, "replay once caught up")
    finally:
        stop.set()
        worker.join()
    assert replayed_before_caught_up == [0]


def test_the_first_version_after_a_message_has_the_heads_set_from_it(redis, settings):
    """The heads set from the replay buffer (the solved linear head) are set as soon as the
    learner has caught up, before the publish that follows the step: otherwise the first
    version after a message would serve them as they were before it (at a stream's start,
    the prior) until the next publish."""
    cfg = ModelConfig(name="first", inputs=4, task="regression")
    names = Names("first", settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names)
    learner = Learner(cfg, SampleStream(redis, names, (4,)), store)
    learner.start()  # publishes version 1, the untrained model
    time.sleep(0.3)  # the first message comes later than the publish cadence (250 ms)
    x, y = linear_samples(40, seed=7)
    learner.queue.write([Samples(x, y)])
    stop = threading.Event()
    worker = threading.Thread(target=learner.run, args=(stop,))
    worker.start()
    try:
        eventually(lambda: (store.latest_version() or 0) >= 2, 60, "a version after the step")
    finally:
        stop.set()
        worker.join()
    model = networks.build_model(cfg)
    tensors.set_arrays(model, codec.decode(store.fetch(2)[1])[0])
    linear = keras.Model(model.inputs, model.get_layer("heads").output)
    fresh_x, fresh_y = linear_samples(200, seed=8)
    target = standardize.find(model, standardize.Unstandardize)
    want = target.standardized(fresh_y.reshape(-1, 1))[:, 0]
    got = keras.ops.convert_to_numpy(linear(fresh_x))[:, 0, 0]
    assert np.mean(np.abs(got - want)) < 0.05, np.mean(np.abs(want))


def drifting_losses(
    trainer: Trainer, flip_at: int | None, steps: int = 150
) -> list[tuple[int, int]]:
    """Train on 40-sample batches of a linear concept, negated at step `flip_at`; the
    samples seen when the detector fired, and the samples the replay buffer then kept."""
    rng = np.random.default_rng(5)
    fired = []
    for step in range(steps):
        x = rng.normal(0, 1, (40, 4)).astype(np.float32)
        sign = -1 if flip_at is not None and step >= flip_at else 1
        batch = padded([x], [sign * x @ LINEAR], trainer.buckets, (1,))
        detected = trainer.drift.detected
        trainer.step(batch)
        if trainer.drift.detected > detected:
            fired.append((trainer.state.samples_seen, trainer.replay.size))
        while trainer.replay_step():
            pass
    return fired


@pytest.mark.parametrize("flip_at", [None, 75])
def test_drift_is_detected_after_an_abrupt_change_and_never_on_a_stationary_stream(flip_at):
    cfg = ModelConfig(name="d", inputs=4, learning=LearningConfig(replay_ratio=1), learner=FILLS_64)
    trainer = build_trainer(cfg, deadletter=lambda *_: None)
    trainer.warm_up()
    fired = drifting_losses(trainer, flip_at)
    if flip_at is None:
        assert fired == []
    else:
        assert fired and 75 * 40 < fired[0][0] <= 85 * 40, f"fired at samples {fired}"
        assert trainer.figures()["drifts_detected"] == len(fired)
        seen, kept = fired[0]
        assert kept <= seen - 75 * 40 + 80, "the replay buffer forgot the old concept"


def test_detector_alone_ignores_a_falling_loss_and_noise():
    rng = np.random.default_rng(6)
    detector = DriftDetector()
    seen = 0
    for step in range(2000):
        seen += 40
        level = 0.1 + np.exp(-step / 300)  # a model learning: the loss falls
        assert not detector.add(40, float(rng.exponential(level, 40).mean()), seen)
    assert detector.figures() == {"drifts_detected": 0, "last_drift_at_sample": None}
