"""The memory head: a nearest-neighbour head over the newest samples, written from the
replay buffer in spare time, mixed by Hedge with the others, served and exported as the
learner scores it.

The learner's own training component as the library's `OnlineModel` with default settings,
a 40-sample message at a time with its spare time after each, as the service runs
(`test_linear_head.learn`).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from streamlearn.nn import export
from streamlearn.online import LearningSpec, ModelSpec, OnlineModel, memory
from streamlearn.online.batch import padded
from streamlearn.online.forward import Forward
from tests.learning.test_linear_head import BUCKETS, MESSAGE, learn


def model_for(task: str, inputs: int, size: int = 500, classes: int | None = None) -> OnlineModel:
    spec = ModelSpec(task, inputs, classes=classes, memory=size, name="mem")
    model = OnlineModel(spec, LearningSpec(buckets=BUCKETS), seed=0)
    model.warm_up()
    return model


def moving_centroids(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Samples around 20 centroids in 5 dimensions, half of each class, every centroid
    moving 0.001 a sample in its own direction (bouncing off the unit cube): a local
    concept that never holds still, as River's RandomRBFDrift."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 1, (20, 5))
    velocity = rng.normal(0, 1, (20, 5))
    velocity *= 0.001 / np.linalg.norm(velocity, axis=1, keepdims=True)
    x, y = np.zeros((n, 5), np.float32), np.zeros(n, np.float32)
    for i, j in enumerate(rng.integers(0, 20, n)):
        centres += velocity
        velocity[(centres < 0) | (centres > 1)] *= -1
        x[i], y[i] = centres[j] + rng.normal(0, 0.08, 5), j % 2
    return x, y


def test_a_concept_that_moves_is_followed():
    """With the memory head the served prediction follows the moving clusters (0.95 at
    seed 0); the network's heads alone, at the same settings, lag behind (0.88)."""
    x, y = moving_centroids(3000, seed=0)
    scores = {}
    for size in (500, 0):
        model = model_for("binary", 5, size)
        right = (learn(model, x, y) > 0.5) == (y > 0.5)
        scores[size] = float(right[1000:].mean())
    assert scores[500] >= 0.92, scores
    assert scores[500] >= scores[0] + 0.03, scores
    assert model.trainer.memory is None  # memory = 0: no such head


def test_the_memory_holds_the_newest_samples_and_answers_with_their_labels():
    """Before any sample the head predicts the prior; after, a point at a cluster's centre
    gets that cluster's label, and the slots hold the newest `memory` samples."""
    model = model_for("binary", 2, size=100)
    trainer = model.trainer
    head = memory.find(trainer.model)
    centres = np.array([[-3.0, 0.0], [3.0, 0.0]], np.float32)
    alone = keras.Model(trainer.model.inputs[0], head.output)
    np.testing.assert_allclose(alone(centres).numpy().ravel(), [0.5, 0.5], atol=1e-6)
    rng = np.random.default_rng(1)
    label = rng.integers(0, 2, 400)
    x = (centres[label] + rng.normal(0, 0.5, (400, 2))).astype(np.float32)
    learn(model, x, label.astype(np.float32))
    assert trainer.memory.writes == 400 // MESSAGE
    near = alone(centres).numpy().ravel()
    assert near[0] < 0.05 and near[1] > 0.95, near
    written = int(np.sum(keras.ops.convert_to_numpy(head.bias) > memory_empty() / 2))
    assert written == 100


def memory_empty() -> float:
    from streamlearn.online.memory import EMPTY

    return EMPTY


def test_the_multiclass_memory_is_what_the_actors_and_the_export_serve(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (300, 5)).astype(np.float32)
    y = np.argmax(x[:, :3], axis=1).astype(np.float32)
    model = model_for("multiclass", 5, classes=3)
    for lo in range(0, len(y), MESSAGE):
        model.learn_many(x[lo : lo + MESSAGE], y[lo : lo + MESSAGE])
    trainer = model.trainer
    assert trainer.memory.writes > 0
    served = Forward(trainer.model, (5,))(x[:50])
    export.standalone(trainer.model).save(tmp_path / "model.keras")
    plain = keras.saving.load_model(tmp_path / "model.keras")
    assert all(type(layer).__module__.startswith("keras.") for layer in plain.layers)
    np.testing.assert_allclose(plain.predict(x[:50], verbose=0), served, rtol=1e-4, atol=1e-4)


def test_a_head_held_at_the_floor_does_not_serve():
    """Hedge keeps every weight at or above its floor so that a head can come back; the
    model serves what each holds above it, and an undo reads the same weights back."""
    mix = model_for("binary", 4).trainer.hedge
    others = len(mix.alpha) - 1
    for _ in range(50):  # head 0 far better than the others
        mix.update(40, np.array([0.05] + [0.7] * others))
    assert np.all(mix.alpha[1:] <= mix.floor)  # (raised to it, then renormalised)
    served = keras.ops.convert_to_numpy(mix.variable)
    np.testing.assert_allclose(served, [1.0] + [0.0] * others, atol=1e-6)
    before = mix.alpha.copy()
    # to within the floor's renormalisation: a weight raised to it sits a little below it
    np.testing.assert_allclose(mix.read(), before, atol=0.6 * mix.floor)


def test_the_learner_scores_what_the_actors_serve():
    """A training step does not compute the memory head; the learner scores a live
    message with the model as served (the memory head's own prediction in it) before it
    learns it: its online metric is the served accuracy, and Hedge weighs the memory by
    its own loss (on moving clusters it carries the prediction). Scored before the 1,040th
    sample, where the detector sees the clusters' movement as a drift and every head
    starts afresh."""
    x, y = moving_centroids(1040, seed=1)
    model = model_for("binary", 5, size=300)
    trainer = model.trainer
    learn(model, x[:1000], y[:1000])
    weights = trainer.hedge.alpha
    assert weights[-1] == max(weights) and weights[-1] > 0.5, weights
    xs, ys = x[1000:], y[1000:]
    served = Forward(trainer.model, (5,))(xs)[:, 0]
    before = trainer.state.online_metric
    trainer.step(padded([xs], [ys], trainer.buckets, (1,)))
    rate = 1 - 0.995 ** len(ys)
    metric = before + (trainer.state.online_metric - before) / rate
    assert metric == pytest.approx(np.mean((served > 0.5) == (ys > 0.5)), abs=1e-6)
