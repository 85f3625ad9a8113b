"""A multiclass model of few inputs has its linear head solved one class against the
rest, as a binary one's is (`streamlearn.online.linear`): a small table's classes are
told apart from tens of samples, where the optimizer takes hundreds."""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np

from streamlearn.config.app import ModelConfig
from streamlearn.nn.networks import build_model
from streamlearn.online.linear import MULTICLASS_INPUTS, LinearHead
from streamlearn.online.replay import Replay

CENTRES = np.array([[2.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 2.0, 0]], np.float32)


def blobs(n: int, seed: int, classes: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """4 inputs around one centre per class."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    return (CENTRES[y] + rng.normal(0, 0.7, (n, 4))).astype(np.float32), y.astype(np.float32)


def solved_head(classes_seen: int) -> Callable[[np.ndarray], np.ndarray]:
    """Head 0's probabilities, solved over 40 samples of the first `classes_seen` classes."""
    model = build_model(ModelConfig(name="blobs", inputs=4, task="multiclass", classes=3))
    replay = Replay(500, (4,), (), ratio=1.0, batch=8, buckets=(8,))
    replay.add(*blobs(40, seed=0, classes=classes_seen))
    assert LinearHead.of(model, "multiclass").update(replay)
    heads = keras.Model(model.inputs, model.get_layer("heads").output)
    return lambda x: np.asarray(heads(x))[:, 0]  # (n, classes)


def test_a_multiclass_head_tells_the_classes_apart_from_forty_samples():
    x, y = blobs(1000, seed=1)
    assert np.mean(np.argmax(solved_head(3)(x), axis=1) == y) >= 0.9  # chance: 1/3


def test_a_class_not_yet_seen_is_not_ruled_out():
    """Its bias is penalised: when it first comes, its log loss is that of a doubt, not of
    a certainty (which would hand the mixture's weight to the heads still at chance)."""
    x, y = blobs(1000, seed=1)
    unseen = solved_head(2)(x[y == 2])[:, 2]
    assert np.median(unseen) >= 0.05, np.median(unseen)


def test_a_multiclass_model_of_many_inputs_leaves_its_head_to_the_optimizer():
    wide = ModelConfig(name="m", inputs=MULTICLASS_INPUTS + 1, task="multiclass", classes=3)
    assert LinearHead.of(build_model(wide), "multiclass") is None
