"""After an abrupt change, the learner is back to its old accuracy within tens of samples.

The learner's own training component (`Trainer`) with default settings, test-then-train a
message at a time as the service runs it: each 10-sample message is predicted by the
actor's forward pass on the current weights, then learned (and replayed from the buffer,
as the learner does in its spare time). Halfway, every label is swapped.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from streamlearn.config import LearnerConfig, ModelConfig
from streamlearn.learner.step import build_trainer
from streamlearn.online.batch import padded
from streamlearn.online.drift import DriftDetector
from streamlearn.online.forward import Forward
from streamlearn.online.trainer import Trainer

MESSAGE = 10
SWAP = 1500


def concept(n: int, seed: int, swap: int = SWAP) -> tuple[np.ndarray, np.ndarray]:
    """A curved boundary in 4 inputs (one irrelevant); the labels swapped from `swap` on."""
    x = np.random.default_rng(seed).uniform(-1, 1, (n, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] ** 2 - 0.5 * x[:, 2] > 0.2).astype(np.float32)
    y[swap:] = 1 - y[swap:]
    return x, y


def swap_trainer(seed: int, message: int = MESSAGE) -> Trainer:
    """The default model of 4 inputs, seeded and warmed up. Its buckets stop at the one the
    messages fill (16 or 64): the default's larger ones would be traced, seconds each, and
    never used; the steps are the same (a warm-up trace's effects are undone)."""
    keras.utils.set_random_seed(seed)
    policy = LearnerConfig(max_batch=16 if message <= 16 else 64)
    trainer = build_trainer(
        ModelConfig(name="swap", inputs=4, task="binary", learner=policy), lambda *_: None
    )
    trainer.warm_up()
    return trainer


def prequential(
    trainer: Trainer, x: np.ndarray, y: np.ndarray, message: int = MESSAGE
) -> np.ndarray:
    """1/0 per sample: right or wrong, predicted before its message was learned."""
    forward = Forward(trainer.model, (x.shape[1],))
    right = np.zeros(len(y))
    for lo in range(0, len(y), message):
        xs, ys = x[lo : lo + message], y[lo : lo + message]
        right[lo : lo + len(ys)] = (forward(xs)[:, 0] > 0.5) == (ys > 0.5)
        trainer.step(padded([xs], [ys], trainer.buckets, (1,)))
        while trainer.replay_step():
            pass
    return right


@pytest.mark.parametrize("seed", [0, 1])
def test_after_a_label_swap_the_next_500_samples_score_within_5_points_of_the_500_before(seed):
    trainer = swap_trainer(seed)
    right = prequential(trainer, *concept(SWAP + 500, seed))
    before, after = right[SWAP - 500 : SWAP].mean(), right[SWAP:].mean()
    assert before > 0.9, f"the concept was learned before the swap: {before:.3f}"
    assert trainer.drift.detected == 1, "the swap is seen as one drift"
    assert after >= before - 0.05, (
        f"500 samples after the swap {after:.3f}, before {before:.3f}; "
        f"per 50 after: {right[SWAP:].reshape(-1, 50).mean(axis=1).round(2).tolist()}"
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_a_swap_in_a_short_stream_of_40_sample_messages_is_caught_on_its_first_message(seed):
    """The labels swapped at the 8th message: the detector tests once it has a few steps'
    spread to judge by, so the swap shows on the step of that message (it waited for the
    9th step, and a short stream such as breast_cancer's 569 samples, swapped at 284, paid
    a whole message more for it)."""
    trainer = swap_trainer(seed, message=40)
    right = prequential(trainer, *concept(440, seed, swap=280), message=40)
    assert trainer.drift.detected == 1 and trainer.drift.last_at == 320, trainer.drift.figures()
    assert trainer.replay.size >= 40, "the step was all the new concept: it stays whole"
    assert right[320:].mean() >= 0.75, (
        f"per message after it: {right[280:].reshape(-1, 40).mean(1)}"
    )


def test_a_rise_right_after_a_fall_is_a_drift():
    """The losses of the test above, seed 0, step by step: at the 7th step the detector sees
    the model learning (a fall from the start's 0.69) and drops the older part; the swap's
    6.2 comes on the next step. With only the fall's newer part left (80 samples) there was
    no reference to rise from, and once the swap's step was in the older part it never
    showed."""
    detector = DriftDetector()
    losses = [0.693, 0.304, 0.272, 0.345, 0.333, 0.248, 0.205, 6.204, 1.917, 1.201, 0.956]
    fired = [40 * (i + 1) for i, loss in enumerate(losses) if detector.add(40, loss, 40 * (i + 1))]
    assert fired == [320]


def test_after_a_drift_every_head_serves_alike():
    """At a drift every head starts afresh on the same samples (the step that showed it):
    the published mixture weighs them alike, rather than favouring the solved linear head
    as a fresh model does (its fit to one message of swapped labels cost breast_cancer_swap
    a point on the quality bench)."""
    trainer = swap_trainer(0, message=40)
    alpha = trainer.model.get_layer("hedge").alpha
    start = keras.ops.convert_to_numpy(alpha)
    assert start[0] > start[1], f"a fresh model favours the linear head: {start}"
    prequential(trainer, *concept(320, 0, swap=280), message=40)
    assert trainer.drift.detected == 1 and trainer.drift.last_at == 320, trainer.drift.figures()
    served = keras.ops.convert_to_numpy(alpha)
    assert served == pytest.approx(np.full(len(served), 1 / len(served))), served


@pytest.mark.parametrize("seed", [0, 1])
def test_a_swap_halfway_through_a_message_leaves_only_its_newer_half_to_learn_from(seed):
    """The labels swapped at the 300th sample, halfway through the message of 280-319,
    which shows the drift: the learner starts afresh on the 20 samples of the new concept,
    not on the 20 of the old one before them."""
    trainer = swap_trainer(seed, message=40)
    x, y = concept(320, seed, swap=300)
    prequential(trainer, x, y, message=40)
    assert trainer.drift.detected == 1 and trainer.drift.last_at == 320, trainer.drift.figures()
    held, labels = trainer.replay.held()
    assert sorted(held.tolist()) == sorted(x[300:].tolist())
    assert np.array_equal(np.sort(labels.ravel()), np.sort(y[300:]))
