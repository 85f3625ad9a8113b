"""`OnlineModel`: the service's model as a library object, learning a sample at a time.

The same network (`network.build` of a `ModelSpec`) and the same trainer (`Trainer`,
with a `LearningSpec`) as the service's learner, so that what a notebook trains is what
the service would have learned from the same samples, and its weights are the blob the
service publishes (`to_bytes`, `from_bytes`: the actors serve one, a notebook loads a
served version). Test-then-train: each `learn_*` call's samples are scored before they
are learned (`figures()`), then replayed in the learner's spare-time manner.

Inputs: a row of numbers (a sequence or array of `spec.sample_shape`), or, where the
spec names its inputs, a dict (missing or None: imputed with the running mean; a
categorical input's value one-hot, an unknown one all zeros). Targets: a number
(regression), 0/1 or a bool (binary), a class index (multiclass).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import keras
import numpy as np

from streamlearn.online import codec, network, tensors
from streamlearn.online.evaluate import decide
from streamlearn.online.numpy_model import NumpyModel
from streamlearn.online.paths import dig, path_of
from streamlearn.online.spec import LearningSpec, ModelSpec, from_dict, to_dict
from streamlearn.online.trainer import Trainer

Row = Sequence[float] | np.ndarray | Mapping[str, Any]


class OnlineModel:
    """A built-in model that learns as it predicts, one sample or many at a time.

    >>> model = OnlineModel(ModelSpec(task="binary", inputs=("temp", "door")), seed=0)
    >>> model.predict_proba_one({"temp": 21.5, "door": 1})  # nothing learned: the prior
    {0: 0.5, 1: 0.5}

    Learning, progressive validation and saving: docs/guides/library.md (doctested).
    """

    def __init__(
        self,
        spec: ModelSpec | None = None,
        learning: LearningSpec | None = None,
        *,
        seed: int | None = None,
    ) -> None:
        """A new model of `spec` (default: a regression on one input) learning as
        `learning` says; `seed` seeds Keras, numpy and Python's `random` first."""
        self.spec = spec or ModelSpec()
        self.learning = learning or LearningSpec()
        if seed is not None:
            keras.utils.set_random_seed(seed)
        self.trainer = Trainer(network.build(self.spec), self.spec, self.learning)
        self._warm = False

    def warm_up(self) -> None:
        """Trace the step for every bucket size and the prediction now (seconds), not at
        the first `learn_*` or `predict_*` call."""
        if not self._warm:
            self.trainer.warm_up()
            self._warm = True

    # -- learning and predicting ---------------------------------------------------------

    def learn_one(self, x: Row, y: float | bool) -> None:
        """Learn one sample (scored first: `figures()`)."""
        self.learn_many([x], [y])

    def learn_many(self, xs: Iterable[Row] | np.ndarray, ys: Iterable[float] | np.ndarray) -> None:
        """Learn a batch of samples, as the learner learns a message: steps of at most the
        largest bucket, each scored before it learns, then replay as far as its budget."""
        x = self.rows(xs)
        y = self._targets(ys, len(x))
        self.warm_up()
        self.trainer.learn(x, y)

    def predict_many(self, xs: Iterable[Row] | np.ndarray) -> np.ndarray:
        """Per sample, the class (int) or the value (float32)."""
        decided = decide(self.spec.task, self._outputs(xs))
        return decided if self.spec.task == "regression" else decided.astype(np.int64)

    def predict_one(self, x: Row) -> int | float:
        """The class, or the value, for one sample."""
        return self.predict_many([x])[0].item()

    def predict_proba_many(self, xs: Iterable[Row] | np.ndarray) -> np.ndarray:
        """Per sample, each class's probability (a binary model's: of 0, then of 1)."""
        if self.spec.task == "regression":
            raise TypeError("predict_proba_*: a regression model predicts values, not classes")
        p = self._outputs(xs).reshape(-1, self.spec.outputs).astype(np.float64)
        return np.concatenate([1 - p, p], axis=1) if self.spec.task == "binary" else p

    def predict_proba_one(self, x: Row) -> dict[int, float]:
        """Each class's probability for one sample (to 6 decimals: float32 holds no more)."""
        return {k: round(float(p), 6) for k, p in enumerate(self.predict_proba_many([x])[0])}

    def _outputs(self, xs: Iterable[Row] | np.ndarray) -> np.ndarray:
        x = self.rows(xs)  # (the prediction traces itself: no warm-up of the step)
        return np.asarray(self.trainer.predict(x), np.float32)

    def figures(self) -> dict[str, object]:
        """Counters and the test-then-train figures: `samples_seen`, `online_loss` and
        `online_metric` (running means), `window_loss`, `window_metric` (over the last
        `learning.recent_window` samples), the replay's, the drift detector's, each head's
        weight."""
        return self.trainer.figures()

    # -- what goes in ----------------------------------------------------------------------

    def rows(self, xs: Iterable[Row] | np.ndarray) -> np.ndarray:
        """Samples as the model takes them: float32 rows of `spec.sample_shape`, copied
        (the model keeps some for replay). ValueError names what does not fit."""
        shape = self.spec.sample_shape
        if self.spec.fields is not None and not isinstance(xs, np.ndarray):
            xs = list(xs)
            if xs and all(isinstance(x, Mapping) for x in xs):
                if self.spec.window is not None:  # a sample is a window of steps
                    raise ValueError(f"x: each sample an array of shape {shape}, not a dict")
                named = [self._named(cast(Mapping[str, Any], x)) for x in xs]
                return np.array(named, np.float32).reshape(-1, *shape)
        try:
            x = np.array(xs, np.float32)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"x: rows of {len(shape)}-d numbers expected ({exc})") from None
        if x.shape[1:] != shape:
            raise ValueError(f"x: each sample of shape {shape} expected, got {x.shape[1:]}")
        if self.spec.fields is None and not np.isfinite(x).all():
            raise ValueError("x: non-finite values (named inputs may be missing; these may not)")
        return x

    def _named(self, x: Mapping[str, Any]) -> list[float]:
        row = []
        for name in self.spec.fields or ():
            value = x[name] if name in x else dig(x, path_of(name))
            values = self.spec.categorical.get(name)
            if values is not None and isinstance(value, bool):
                value = "true" if value else "false"  # as the service reads it
            if values is not None:  # its index; unknown or missing: -1, all zeros one-hot
                row.append(float(values.index(value)) if value in values else -1.0)
            elif value is None:
                row.append(np.nan)  # imputed with the running mean
            elif isinstance(value, bool):
                row.append(1.0 if value else 0.0)
            elif isinstance(value, int | float | np.number):
                row.append(float(value))
            else:
                raise ValueError(f"{name}: a number expected, got {value!r}")
        return row

    def _targets(self, ys: Iterable[float] | np.ndarray, n: int) -> np.ndarray:
        try:
            y = np.array(list(ys) if not isinstance(ys, np.ndarray) else ys, np.float32)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"y: numbers expected ({exc})") from None
        y = y.reshape(-1)
        if len(y) != n:
            raise ValueError(f"y: {n} targets expected, got {len(y)}")
        if not np.isfinite(y).all():
            raise ValueError("y: non-finite targets")
        if self.spec.task != "regression":
            allowed = self.spec.outputs if self.spec.task == "multiclass" else 2
            bad = y[(y != np.round(y)) | (y < 0) | (y >= allowed)]
            if len(bad):
                raise ValueError(f"y: class indices 0 to {allowed - 1} expected, got {bad[0]:g}")
        return y

    # -- what comes out --------------------------------------------------------------------

    def weights(self) -> dict[str, np.ndarray]:
        """The weights as the service publishes them (statistics flushed, the linear head
        solved), by name."""
        self.trainer.flush_statistics()
        self.trainer.settle()
        return tensors.get_arrays(self.trainer.model)

    def to_bytes(self) -> bytes:
        """The weights blob an actor serves (safetensors, `codec`), with the spec."""
        meta = {
            "model": self.spec.name,
            "spec": json.dumps(to_dict(self.spec)),
            "step": str(self.trainer.state.step),
            "samples_seen": str(self.trainer.state.samples_seen),
        }
        return codec.encode(self.weights(), meta)

    @classmethod
    def from_bytes(
        cls, blob: bytes, spec: ModelSpec | None = None, learning: LearningSpec | None = None
    ) -> OnlineModel:
        """A model with `blob`'s weights (`to_bytes`', or a version the service
        published: then give its `spec`, `ModelConfig.spec`). It goes on learning from
        them, with a fresh optimizer state."""
        arrays, meta = codec.decode(blob)
        if spec is None:
            if "spec" not in meta:
                raise ValueError("blob: no spec in its metadata (a served version): give spec=")
            spec = from_dict(json.loads(meta["spec"]))
        model = cls(spec, learning)
        codec.check_fits(arrays, tensors.spec(model.trainer.model))
        tensors.set_arrays(model.trainer.model, arrays)
        model.trainer.state.samples_seen = int(meta.get("samples_seen", 0))
        return model

    def save(self, path: str | Path) -> None:
        """`to_bytes` into a file."""
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def load(cls, path: str | Path, learning: LearningSpec | None = None) -> OnlineModel:
        """The model `save` wrote."""
        return cls.from_bytes(Path(path).read_bytes(), learning=learning)

    def to_numpy(self) -> NumpyModel:
        """The model as it predicts now, standalone: numpy alone, as a TensorFlow-free
        actor (and a device) computes it; called on rows, it gives the raw outputs."""
        served = NumpyModel(self.spec)
        served.load(self.weights())
        return served
