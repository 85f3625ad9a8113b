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

from streamlearn.config import ModelConfig
from streamlearn.learner.batching import padded
from streamlearn.learner.step import Trainer
from streamlearn.nn.forward import Forward

MESSAGE = 10
SWAP = 1500


def concept(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A curved boundary in 4 inputs (one irrelevant); the labels swapped from `SWAP` on."""
    x = np.random.default_rng(seed).uniform(-1, 1, (n, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] ** 2 - 0.5 * x[:, 2] > 0.2).astype(np.float32)
    y[SWAP:] = 1 - y[SWAP:]
    return x, y


def prequential(trainer: Trainer, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """1/0 per sample: right or wrong, predicted before its message was learned."""
    forward = Forward(trainer.model, (x.shape[1],))
    right = np.zeros(len(y))
    for lo in range(0, len(y), MESSAGE):
        xs, ys = x[lo : lo + MESSAGE], y[lo : lo + MESSAGE]
        right[lo : lo + len(ys)] = (forward(xs)[:, 0] > 0.5) == (ys > 0.5)
        trainer.step(padded([xs], [ys], trainer.buckets, (1,)))
        while trainer.replay_step():
            pass
    return right


@pytest.mark.parametrize("seed", [0, 1])
def test_after_a_label_swap_the_next_500_samples_score_within_5_points_of_the_500_before(seed):
    keras.utils.set_random_seed(seed)
    trainer = Trainer(ModelConfig(name="swap", inputs=4, task="binary"), lambda *_: None)
    trainer.warm_up()
    right = prequential(trainer, *concept(SWAP + 500, seed))
    before, after = right[SWAP - 500 : SWAP].mean(), right[SWAP:].mean()
    assert before > 0.9, f"the concept was learned before the swap: {before:.3f}"
    assert trainer.drift.detected == 1, "the swap is seen as one drift"
    assert after >= before - 0.05, (
        f"500 samples after the swap {after:.3f}, before {before:.3f}; "
        f"per 50 after: {right[SWAP:].reshape(-1, 50).mean(axis=1).round(2).tolist()}"
    )
