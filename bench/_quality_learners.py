"""The learners the quality benchmark compares, each scored test-then-train.

- River's online models, one sample at a time: the reference; and, to tell the service's
  learning from its protocol, the same models a message at a time (`run_river`).
- streamlearn in this process (`in_process`): the service's model as the library's
  `OnlineModel`, a message at a time.

Every run yields an `Outcome`: per sample, 1/0 for a right/wrong class or the absolute
error, and the seconds it took. Here those are CPU seconds of this process
(`time.process_time`, every thread's), so that other load on a shared machine, or the
service's processes starting beside it, does not move the figures. A learner with no
answer yet (a tree before its first sample) counts as wrong, or as predicting 0.0 for a
regression.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from bench._quality_streams import Stream
from streamlearn.online.evaluate import score

if TYPE_CHECKING:
    from streamlearn.online.model import OnlineModel

# label, what it is
REFERENCES = {
    "linear": "River: StandardScaler | LogisticRegression (one-vs-rest) / LinearRegression",
    "hat": "River: HoeffdingAdaptiveTree{Classifier,Regressor}",
    "arf": "River: ARF{Classifier,Regressor}, n_models=5",
    "knn": "River: StandardScaler | KNN{Classifier,Regressor}",
}
ARF_MODELS = 5  # River's default is 10: half the models, twice as fast, within a point


@dataclass
class Outcome:
    """Per-sample scores of one learner on one stream."""

    scores: np.ndarray  # 1/0 (right/wrong class) or absolute error, per sample
    seconds: float  # CPU seconds in this process; wall seconds for the service
    info: dict[str, object] | None = None

    @property
    def score(self) -> float:
        """Accuracy, or mean absolute error, over the whole stream."""
        return float(self.scores.mean())

    @property
    def samples_per_s(self) -> float:
        return len(self.scores) / max(self.seconds, 1e-9)


def scores(stream: Stream, predicted: np.ndarray) -> np.ndarray:
    """Right (1) or wrong (0) per sample, or the absolute error (`streamlearn evaluate`'s
    scoring); NaN (no answer) is wrong, or 0.0 for a regression."""
    return score(stream.task, stream.y, predicted)


# -- River ------------------------------------------------------------------------------


def river_model(kind: str, stream: Stream) -> object:
    from river import forest, linear_model, multiclass, neighbors, preprocessing, tree, utils

    regression = stream.task == "regression"
    if kind == "linear":
        if regression:
            return preprocessing.StandardScaler() | linear_model.LinearRegression()
        if stream.task == "multiclass":
            return preprocessing.StandardScaler() | multiclass.OneVsRestClassifier(
                linear_model.LogisticRegression()
            )
        return preprocessing.StandardScaler() | linear_model.LogisticRegression()
    if kind == "hat":
        if regression:
            return tree.HoeffdingAdaptiveTreeRegressor(seed=0)
        return tree.HoeffdingAdaptiveTreeClassifier(seed=0)
    if kind == "arf":
        if regression:
            return forest.ARFRegressor(n_models=ARF_MODELS, seed=0)
        return forest.ARFClassifier(n_models=ARF_MODELS, seed=0)
    if kind == "knn":
        # River's default engine, SWINN (an approximate graph past its first 500 samples),
        # seeded like the trees: unseeded, a whole stream's score moved by up to 0.01. Its
        # default distance, named, so that River still swaps in its compiled one.
        search = neighbors.SWINN(dist_func=utils.math._euclidean_distance, seed=0)
        knn = neighbors.KNNRegressor if regression else neighbors.KNNClassifier
        return preprocessing.StandardScaler() | knn(engine=search)
    raise ValueError(f"no River reference {kind!r}; known: {list(REFERENCES)}")


def run_river(kind: str, stream: Stream, message_size: int = 1) -> Outcome:
    """Test-then-train a message at a time: predict its rows with the model as it was
    before the message, then learn them one by one. River's own protocol is one sample
    per message; `message_size` rows give it the labels as late as the service gets them.
    """
    model = river_model(kind, stream)
    rows = [dict(enumerate(r)) for r in stream.x.tolist()]
    targets = stream.y.tolist() if stream.task == "regression" else stream.y.astype(int).tolist()
    predicted = np.full(stream.n, np.nan, np.float32)
    start = time.process_time()
    for lo in range(0, stream.n, message_size):
        message = range(lo, min(lo + message_size, stream.n))
        for i in message:
            p = model.predict_one(rows[i])
            if p is not None:
                predicted[i] = float(p)
        for i in message:
            model.learn_one(rows[i], targets[i])
    return Outcome(scores(stream, predicted), time.process_time() - start)


# -- streamlearn in this process --------------------------------------------------------


class MessageLearner(Protocol):
    """What learns from a message: the seam where another training component goes
    (`streamlearn.online.OnlineModel`'s methods)."""

    def predict_many(self, x: np.ndarray) -> np.ndarray:
        """Per sample, the class or the value, with the weights as they are now."""

    def learn_many(self, x: np.ndarray, y: np.ndarray) -> None:
        """Train on one message's samples."""

    def figures(self) -> dict[str, object]:
        """Counters worth reporting (steps, replay, drift), for the JSON."""


FIGURES = ("step", "replay_steps", "replay_per_sample", "drifts_detected")
FIGURES += ("last_drift_at_sample", "rollbacks")  # of `figures()`, in the JSON


def in_process(cfg: Any) -> OnlineModel:
    """The service's model for `cfg` (a `ModelConfig`) as the library's `OnlineModel`,
    built and warmed up as the learner builds it: `learn_many` pads the message to the
    learner's bucket, steps on it (scored before it learns; the model's input statistics
    updated after), then replays from its buffer as far as the replay budget allows, as
    the learner does in its spare time between fresh batches. Predictions go through the
    compiled forward pass. Warmed up here: the traces are not timed."""
    from streamlearn.online.model import OnlineModel  # Keras: loaded when first needed

    model = OnlineModel(cfg.spec, cfg.learning_spec())
    model.warm_up()
    return model


def model_table(stream: Stream, overrides: dict | None = None) -> dict:
    """`[models.NAME]` as a user would write it for `stream`: its shape, then `overrides`
    (`{"learning_rate": 0.003, "learner": {"max_wait_ms": 5}}`; none: the defaults)."""
    table: dict = {"inputs": stream.inputs, "task": stream.task}
    if stream.classes is not None:
        table["classes"] = stream.classes
    for key, value in (overrides or {}).items():
        merged = {**table.get(key, {}), **value} if isinstance(value, dict) else value
        table[key] = merged
    return table


def model_config(stream: Stream, overrides: dict | None = None) -> object:
    """The ModelConfig of `model_table`, validated as the service validates it."""
    from streamlearn.config import parse_config

    return parse_config({"models": {stream.name: model_table(stream, overrides)}}).model(None)


def seed(value: int) -> None:
    """Seed Keras, TensorFlow, numpy and Python's `random` with `value`, before a learner
    is built; on TensorFlow also make its ops deterministic (once: it stays on)."""
    import keras

    keras.utils.set_random_seed(value)
    if keras.backend.backend() == "tensorflow":
        _deterministic_ops()


@functools.cache
def _deterministic_ops() -> None:
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()


def run_in_process(stream: Stream, message_size: int, learner: MessageLearner) -> Outcome:
    """Test-then-train a message at a time: predict its rows, then learn them."""
    predicted = np.full(stream.n, np.nan, np.float32)
    start = time.process_time()
    for lo in range(0, stream.n, message_size):
        x, y = stream.x[lo : lo + message_size], stream.y[lo : lo + message_size]
        predicted[lo : lo + len(y)] = learner.predict_many(x)
        learner.learn_many(x, y)
    seconds = time.process_time() - start
    figures = {k: v for k, v in learner.figures().items() if k in FIGURES}
    return Outcome(scores(stream, predicted), seconds, figures)
