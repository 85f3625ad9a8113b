"""Replayed steps, several to a compiled call (`streamlearn.online.multistep`): the
model learns what as many calls of one step each would teach it, the replay's budget and
figures are those of single steps, and a non-finite step among them is undone."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from streamlearn.config import LearnerConfig, ModelConfig
from streamlearn.learner.step import build_trainer
from streamlearn.online import tensors
from streamlearn.online.batch import padded
from streamlearn.online.guard import all_finite
from streamlearn.online.multistep import STEPS
from streamlearn.online.trainer import Trainer

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="several steps to a call on TensorFlow only"
)


def _trainer(task: str = "binary", inputs: int = 4) -> tuple[Trainer, np.ndarray, np.ndarray]:
    """A warmed-up trainer that has learned 160 samples of a linear concept."""
    keras.utils.set_random_seed(0)
    policy = LearnerConfig(max_batch=64)  # the steps of 40 fill 64: no 256 traced, unused
    cfg = ModelConfig(name="multi", inputs=inputs, task=task, learner=policy)
    trainer = build_trainer(cfg, lambda *_: None)
    trainer.warm_up()
    x = np.random.default_rng(0).uniform(-1, 1, (160, inputs)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.float32)
    for lo in range(0, 160, 40):
        trainer.step(padded([x[lo : lo + 40]], [y[lo : lo + 40]], trainer.buckets, (1,)))
    return trainer, x, y


def test_steps_in_one_call_learn_what_as_many_calls_learn():
    trainer, _, _ = _trainer()
    assert trainer.multistep is not None
    batch = trainer.replay.sample(STEPS)
    assert batch.x.shape == (STEPS, trainer.replay.batch, 4) and batch.n == STEPS * 16
    rate = trainer.model.optimizer.learning_rate
    rates = [float(rate.numpy()) * (1 - 0.1 * i) for i in range(STEPS)]  # each step its own
    before = tensors.snapshot(trainer.variables)
    trainer.fit(batch.x, batch.y, batch.w, rates)
    together = tensors.snapshot(trainer.variables)
    tensors.restore(trainer.variables, before)
    for i in range(STEPS):
        rate.assign(rates[i])
        trainer.fit(batch.x[i], batch.y[i], batch.w[i])
    one_by_one = tensors.snapshot(trainer.variables)
    moved = max(float(np.max(np.abs(b - a))) for a, b in zip(before, one_by_one, strict=True))
    assert moved > 1e-3  # the steps did learn
    for a, b in zip(together, one_by_one, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_the_replay_budget_is_spent_in_fewer_calls_and_counted_in_steps():
    trainer, _, _ = _trainer()
    calls = []
    fit = trainer.fit
    trainer.fit = lambda x, y, w, rates=(): calls.append(x.shape) or fit(x, y, w, rates)
    while trainer.replay_step():
        pass
    budget = trainer.replay.ratio * trainer.replay.inserted  # 16 x 160 samples
    assert trainer.replay.replayed == budget
    assert trainer.replay_steps == budget // trainer.replay.batch  # 160 steps
    assert sum(len(s) == 3 for s in calls) == 160 // STEPS  # all of them 8 to a call
    assert trainer.retraces == 0


def test_a_non_finite_step_among_them_is_undone():
    trainer, x, y = _trainer()
    assert trainer.set_heads()  # set from the samples as they came: not due again
    trainer.replay.x[:] = np.nan  # what no sample can be: the buffer held only finite ones
    assert trainer.replay.due(STEPS)
    assert trainer.replay_step() is False
    assert trainer.state.rollbacks == 1
    assert all_finite(tensors.snapshot(trainer.variables))
    # it goes on learning: the next fresh step is kept, and scored as a model that learned
    assert trainer.step(padded([x[:40]], [y[:40]], trainer.buckets, (1,)))
    assert trainer.state.rollbacks == 1 and trainer.state.step == 5
    assert np.isfinite(trainer.state.online_loss)
