"""A step's figures are its own batch's: the online metric and the heads' losses Hedge
moves by, for a batch of any size (a small one was traced before the compiled metrics were
built, and its logs were a mean since the first step)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from streamlearn.config import ModelConfig
from streamlearn.learner.step import build_trainer
from streamlearn.online.batch import padded
from streamlearn.online.forward import Forward


@pytest.mark.parametrize("rows", [10, 40])
def test_a_step_scores_its_own_batch(rows):
    keras.utils.set_random_seed(0)
    trainer = build_trainer(
        ModelConfig(name="fig", inputs=4, task="binary", memory=0), lambda *_: None
    )
    trainer.warm_up()
    x = np.random.default_rng(0).uniform(-1, 1, (400 + rows, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.float32)
    for lo in range(0, 400, rows):
        trainer.step(padded([x[lo : lo + rows]], [y[lo : lo + rows]], trainer.buckets, (1,)))
    xs, wrong = x[400:], 1 - y[400:]  # every label swapped: most served answers are wrong
    served = Forward(trainer.model, (4,))(xs)[:, 0]
    weights = trainer.hedge.alpha.copy()
    before = trainer.state.online_metric
    trainer.step(padded([xs], [wrong], trainer.buckets, (1,)))
    rate = 1 - 0.995**rows
    metric = before + (trainer.state.online_metric - before) / rate
    assert metric == pytest.approx(np.mean((served > 0.5) == (wrong > 0.5)), abs=1e-5)
    assert metric < 0.3
    # every head was wrong on the batch: the best head so far loses weight
    assert trainer.hedge.alpha[np.argmax(weights)] < max(weights)
