"""Online input standardisation: a layer of the model, its statistics learned from the stream.

Users send raw features. The model's first layer, `Standardize`, computes
`(x - mean) / sqrt(var)` per input feature (0 for a feature constant so far), with `mean`,
`var` and `count` kept as non-trainable weights: they travel with the published weights
and the checkpoints, so an actor applies exactly what the learner used. The learner
updates them from each fresh batch after its step (`Statistics`), not by gradients: exact
running moments (Chan's parallel update) over the first `horizon` samples, then an
exponential forgetting with that horizon, so a drifting input scale is followed.

Before any sample the layer is the identity (mean 0, var 1). A regression's model ends in
`Unstandardize`, the same statistics of the target, applied the other way round.
"""

from __future__ import annotations

import keras
import numpy as np

from streamlearn.online.numpy_model import EPSILON  # noqa: E402, F401  (one definition)


@keras.saving.register_keras_serializable(package="streamlearn")
class Standardize(keras.layers.Layer):
    """`(x - mean) / sqrt(var)` over the last axis; statistics set by `update`.

    Columns listed in `keep` (a categorical input's index, `streamlearn.online.encode`) pass
    through as they are. A NaN (a missing named input) stays NaN, for `Encode` to impute.
    """

    def __init__(self, keep: list[int] | tuple[int, ...] = (), **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.keep = [int(i) for i in keep]

    def get_config(self) -> dict:
        return {**super().get_config(), "keep": self.keep}

    def build(self, input_shape: tuple) -> None:
        features = (input_shape[-1],)
        self.mean = self.add_weight(
            shape=features, initializer="zeros", trainable=False, name="mean"
        )
        self.var = self.add_weight(shape=features, initializer="ones", trainable=False, name="var")
        self.count = self.add_weight(shape=(), initializer="zeros", trainable=False, name="count")

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """The mean and variance it computes with, as arrays."""
        return keras.ops.convert_to_numpy(self.mean), keras.ops.convert_to_numpy(self.var)

    def call(self, x):
        # A feature constant so far (var 0) is centred to 0, as River's StandardScaler does.
        spread = self.var > EPSILON
        scale = keras.ops.where(spread, keras.ops.rsqrt(keras.ops.maximum(self.var, EPSILON)), 0.0)
        if not self.keep:
            return (x - self.mean) * scale
        kept = np.zeros(x.shape[-1], bool)
        kept[self.keep] = True
        return (x - keras.ops.where(kept, 0.0, self.mean)) * keras.ops.where(kept, 1.0, scale)


@keras.saving.register_keras_serializable(package="streamlearn")
class Unstandardize(Standardize):
    """A regression's last layer: `z * sqrt(var) + mean`, the target's running moments.

    The layers before it learn a standardised target, whatever the target's units: an
    optimizer's step size then moves the prediction by a share of the target's spread,
    not by a fixed amount of its units (docs/learning-log.md, "Standardisation"). A
    target constant so far (var 0) gives its mean. The loss and the online figures stay
    in the target's own units.
    """

    def call(self, z):
        return z * keras.ops.sqrt(keras.ops.maximum(self.var, EPSILON)) + self.mean

    def standardized(self, y: np.ndarray) -> np.ndarray:
        """The targets `y` as the layers before this one learn them (its inverse)."""
        mean, var = self.moments()
        return (y - mean) / np.sqrt(np.maximum(var, EPSILON))


def find(model: keras.Model, kind: type[Standardize] = Standardize) -> Standardize | None:
    """The model's `Standardize` (or `Unstandardize`) layer, None when it has none."""
    return next((layer for layer in model.layers if type(layer) is kind), None)


def statistics(model: keras.Model, horizon: int) -> list[tuple[Statistics, bool]]:
    """The running moments behind the model's layers: of the inputs (`False`) and of a
    regression's target (`True`)."""
    found = ((find(model, kind), kind is Unstandardize) for kind in (Standardize, Unstandardize))
    return [(Statistics(layer, horizon), target) for layer, target in found if layer is not None]


class Statistics:
    """The running moments behind a `Standardize` layer, kept by the learner in float64.

    They are written to the layer's weights (what the model computes with, publishes and
    checkpoints) only when they have moved by more than `tolerance` of a standard
    deviation (or its square, for the variance) since the last write: once they settle, a
    step costs no variable writes, which are on the learner's critical path. They are
    read from the layer once, at the first update, so a resumed learner goes on from its
    checkpoint's.
    """

    # float64, one per feature; None until the first `update` (`_read`, then `_fold`)
    mean: np.ndarray
    var: np.ndarray
    _written_mean: np.ndarray
    _written_var: np.ndarray
    _shift: np.ndarray
    _s1: np.ndarray
    _s2: np.ndarray
    _seen: np.ndarray

    def __init__(self, layer: Standardize, horizon: int, tolerance: float = 0.01) -> None:
        self.layer = layer
        self.horizon = horizon
        self.tolerance = tolerance
        self.mean = self.var = self._written_mean = self._written_var = None  # type: ignore[assignment]
        self.count = 0.0
        self._unwritten = True
        # rows not yet folded in: their count and sums of (row - shift) and its square,
        # shifted by the mean of when they began, so that the sums lose no precision
        self._pending = 0
        self._shift = self._s1 = self._s2 = self._seen = None  # type: ignore[assignment]

    def update(self, x: np.ndarray) -> None:
        """Fold the rows of `x` (samples, or windows of steps) into the statistics.

        A step only adds to two sums; they are folded in once a chunk of rows is
        pending (every call at first, then every 1,024 rows) and at every `flush` (the
        learner's publish), so the statistics lag by at most that chunk.

        >>> layer = Standardize(); layer.build((None, 2))
        >>> stats = Statistics(layer, horizon=10_000)
        >>> x = np.random.default_rng(0).normal([5, -3], [2, 0.5], (1000, 2)).astype("float32")
        >>> for part in np.split(x, 4):  # each part folds in: 250 rows >= a quarter of those seen
        ...     stats.update(part)
        >>> np.allclose(stats.mean, x.mean(axis=0)), np.allclose(stats.var, x.var(axis=0))
        (True, True)
        >>> written = keras.ops.convert_to_numpy(layer.mean)
        >>> bool(np.all(np.abs(written - x.mean(axis=0)) <= 0.01 * x.std(axis=0) + 1e-6))
        True
        """
        rows = x.reshape(-1, x.shape[-1])
        if not len(rows):
            return
        if self.mean is None:
            self._read()
        if not self._pending:
            self._shift = self.mean
            self._s1, self._s2 = np.zeros_like(self.mean), np.zeros_like(self.mean)
            self._seen = np.zeros_like(self.mean)
        d = rows - self._shift  # float64
        missing = np.isnan(d)
        if missing.any():  # a missing named input: left out of its feature's sums
            d[missing] = 0.0
            self._seen += len(rows) - missing.sum(axis=0)
        else:
            self._seen += len(rows)
        self._s1 += d.sum(axis=0)
        self._s2 += np.einsum("ij,ij->j", d, d)
        self._pending += len(rows)
        if self._pending >= min(1024, max(1, self.count // 4)):
            self._fold()

    def flush(self) -> None:
        """Fold in the rows still pending."""
        if self._pending:
            self._fold()

    def _fold(self) -> None:
        """The pending rows into the running moments (Chan's update, with forgetting)."""
        rows, self._pending = self._pending, 0
        n = np.maximum(self._seen, 1.0)  # per feature: its values seen (missing ones not)
        batch_mean = self._s1 / n
        batch_var = np.maximum(self._s2 / n - batch_mean**2, 0.0)
        batch_mean = batch_mean + self._shift
        old = np.minimum(self.count, np.maximum(self.horizon - n, 0))  # older weigh less
        total = old + n
        delta = batch_mean - self.mean
        mean = self.mean + delta * (n / total)
        var = (old * self.var + n * batch_var + delta**2 * old * n / total) / total
        unseen = self._seen == 0  # a feature missing from every pending row keeps its moments
        mean, var = np.where(unseen, self.mean, mean), np.where(unseen, self.var, var)
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(var.astype(np.float32)))):
            return  # values too large for float32 statistics: these rows are left out of them
        self.mean, self.var, self.count = mean, var, min(self.count + rows, self.horizon)
        if self._unwritten or self._moved():
            self._write()

    def _moved(self) -> bool:
        spread = np.maximum(self._written_var, EPSILON)
        shift = np.abs(self.mean - self._written_mean) / np.sqrt(spread)
        scale = np.abs(self.var - self._written_var) / spread
        return bool(np.any(shift > self.tolerance) or np.any(scale > 2 * self.tolerance))

    def _read(self) -> None:
        mean, var = self.layer.moments()
        self.mean, self.var = mean.astype(np.float64), var.astype(np.float64)
        self.count = float(keras.ops.convert_to_numpy(self.layer.count))
        self._written_mean, self._written_var = self.mean.copy(), self.var.copy()
        self._unwritten = self.count == 0  # the first statistics replace the identity

    def _write(self) -> None:
        self.layer.mean.assign(self.mean.astype(np.float32))
        self.layer.var.assign(self.var.astype(np.float32))
        self.layer.count.assign(np.float32(self.count))
        self._written_mean, self._written_var = self.mean.copy(), self.var.copy()
        self._unwritten = False
