"""Depth that adapts: an output head on the inputs and after every hidden layer, mixed.

Hedge Backpropagation (Sahoo et al., IJCAI 2018, arXiv 1711.03705), the built-in
architectures' default (`heads = "hedge"`): head 0 reads the standardised inputs (a linear
model, or a logistic one), head k the k-th hidden layer's output, then, where the model
has them, the steps head (`steps`) and the memory head (`memory`). Training learns every
head on its own loss, their mean the training loss (`HeadsLoss`): shallow heads learn fast
and carry the prediction at the start of a stream and after a change, deeper ones take
over as the concept needs them. The model serves `sum_k alpha_k * head_k` (`HedgeMix`).

In training, `HedgeMix` outputs the mixture and the heads stacked, (batch, 1 + heads,
outputs): the loss reads the heads, the compiled metric (`served`) the mixture, and
`HeadLosses` each head's mean loss.

The mixture weights `alpha` are a weight of the model (`hedge/alpha`), so they are
published, checkpointed and undone with the rest, the actors serve exactly what the
learner scores, and `export` writes them as built-in layers (`as_builtin`). The learner
moves them by Hedge on each head's loss (`Hedge`), outside the compiled step, so the step
is the same on every backend:

- after every fresh step each weight is multiplied by `beta ** (n * loss_k)` (replayed
  steps do not count: their samples were learned), faster over the first samples after
  the prior or a drift (`Hedge.rate`: a few samples tell the heads apart, which
  `beta` alone takes hundreds to act on), raised to a floor of
  `smoothing / heads` so that a head out of favour can come back after a change, and
  renormalised; a regression's losses are taken relative to the heads' mean, so the pace
  does not depend on the target's scale;
- the model serves each weight above the floor: the floor keeps a head in the race, it
  does not make it serve;
- the weights start from a prior that favours the solved linear head (`linear`), fitted to
  every sample from the first message on, and after a drift are uniform, as no head is
  known to be better on the new concept.

What was measured and tried (beta, the losses, the prior, other rules): docs/learning-log.md.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

# The log of each head's mean loss over the step's batch, then the served prediction's mean
# squared error (`served_error`)
HEAD_LOSSES = "head_losses"
# The per-row form of each built-in head's metric (`network.HEADS`), by its log name.
PER_ROW_METRICS = {
    "mae": keras.metrics.mean_absolute_error,
    "binary_accuracy": keras.metrics.binary_accuracy,
    "sparse_categorical_accuracy": keras.metrics.sparse_categorical_accuracy,
}


@keras.saving.register_keras_serializable(package="streamlearn")
class Heads(keras.layers.Layer):
    """One output head per input tensor (a tap), as one layer: (batch, heads, outputs).

    The heads' weights are one kernel over the taps side by side, of which head k reads
    its diagonal block (tap k's rows, its own columns; the rest stays zero): one variable
    instead of one per head, which halves what the heads add to a step.

    Each head is computed from its block alone: a head of one output as its tap times a
    row of weights, summed (one loop that XLA fuses with the activation and the loss), a
    head of several as a matrix product; a product against the whole kernel, masked,
    made the step a third slower (docs/learning-log.md, "The step's cost").
    """

    def __init__(self, outputs: int, activation: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.outputs = outputs
        self.activation = keras.activations.get(activation)
        self._activation = activation

    def build(self, input_shape: Any) -> None:
        dims = [int(shape[-1]) for shape in input_shape]
        self.heads = len(dims)
        width = self.heads * self.outputs
        # zero: every head predicts the prior (0.5, the classes alike, the target's mean)
        # until it learns, as after a drift, rather than a random guess on raw inputs
        self.kernel = self.add_weight(shape=(sum(dims), width), initializer="zeros", name="kernel")
        self.bias = self.add_weight(shape=(width,), initializer="zeros", name="bias")
        starts = np.cumsum([0, *dims])
        # head k's block of the kernel: (rows of tap k, columns of head k)
        self.spans = [
            (int(lo), int(lo + dim), k * self.outputs, (k + 1) * self.outputs)
            for k, (lo, dim) in enumerate(zip(starts, dims, strict=False))
        ]

    def call(self, taps):
        z = []
        for tap, (lo, hi, left, right) in zip(taps, self.spans, strict=True):
            block = self.kernel[lo:hi, left:right]
            if self.outputs == 1:  # a row of weights: multiplied and summed, fused
                row = keras.ops.reshape(block, (1, hi - lo))
                z.append(keras.ops.sum(tap * row, axis=-1, keepdims=True))
            else:
                z.append(keras.ops.matmul(tap, block))
        z = keras.ops.concatenate(z, axis=-1) + self.bias
        return self.activation(keras.ops.reshape(z, (-1, self.heads, self.outputs)))

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return (input_shape[0][0], len(input_shape), self.outputs)

    def blocks(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each head's (kernel, bias), as a `Dense` of its tap holds them."""
        kernel = keras.ops.convert_to_numpy(self.kernel)
        bias = keras.ops.convert_to_numpy(self.bias)
        return [(kernel[lo:hi, left:right], bias[left:right]) for lo, hi, left, right in self.spans]

    def get_config(self) -> dict:
        return {**super().get_config(), "outputs": self.outputs, "activation": self._activation}


@keras.saving.register_keras_serializable(package="streamlearn")
class HedgeMix(keras.layers.Layer):
    """`sum_k alpha_k * head_k`, alpha a non-trainable weight (uniform when built; the
    learner sets its prior: `Hedge`)."""

    def build(self, input_shape: Any) -> None:
        self.heads = int(input_shape[1])
        self.alpha = self.add_weight(
            shape=(self.heads,),
            initializer=keras.initializers.Constant(1.0 / self.heads),
            trainable=False,
            name="alpha",
        )

    def call(self, stacked, training=None):
        alpha = keras.ops.cast(self.alpha, stacked.dtype)[:, None]
        mix = keras.ops.sum(stacked * alpha, axis=1)
        if training:
            return keras.ops.concatenate([mix[:, None, :], stacked], axis=1)
        return mix

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return (input_shape[0], input_shape[2])


def served(y_pred: Any) -> Any:
    """The served prediction in a model's output: the mixture of a training output."""
    return y_pred[:, 0] if len(y_pred.shape) == 3 else y_pred


def _per_head(base: str, y_true: Any, y_pred: Any) -> Any:
    """Each head's loss per sample, (batch, heads), from a training output: one call."""
    heads = y_pred[:, 1:]  # (batch, heads, outputs)
    if base.startswith("sparse"):  # a class index per row
        y_true = keras.ops.reshape(y_true, (-1, 1))
    else:
        y_true = keras.ops.reshape(y_true, (-1, 1, heads.shape[-1]))
    y_true = keras.ops.repeat(keras.ops.cast(y_true, heads.dtype), heads.shape[1], axis=1)
    return keras.losses.get(base)(y_true, heads)


@keras.saving.register_keras_serializable(package="streamlearn")
class HeadsLoss(keras.losses.Loss):
    """The mean of the heads' losses (training), or the served prediction's loss."""

    def __init__(self, base: str, **kwargs: Any) -> None:
        super().__init__(name=kwargs.pop("name", base), **kwargs)
        self.base = base
        self.fn = keras.losses.get(base)

    def call(self, y_true, y_pred):
        if len(y_pred.shape) != 3:
            return self.fn(y_true, y_pred)
        return keras.ops.mean(_per_head(self.base, y_true, y_pred), axis=1)

    def get_config(self) -> dict:
        return {**super().get_config(), "base": self.base}


def served_metric(name: str) -> keras.metrics.Metric:
    """The compiled metric `name` (binary_accuracy, mae, ...) on the served prediction."""
    return keras.metrics.MeanMetricWrapper(served_score, name=name, metric=name)


@keras.saving.register_keras_serializable(package="streamlearn")
def served_score(y_true: Any, y_pred: Any, metric: str) -> Any:
    """Metric `metric`'s per-sample score of the served prediction."""
    return PER_ROW_METRICS[metric](y_true, served(y_pred))


def served_error(y_true: Any, y_pred: Any) -> Any:
    """Each row's squared error of the served prediction, (batch,): a regression's, or a
    classifier's Brier score (its probabilities against the one-hot class).

    What the drift detector watches (`Trainer.step`). Bounded, unlike the log loss: a
    learner replaying its buffer grows surer of its answers, the wrong ones too, so on a
    noisy stream its log loss climbs while it is right as often as ever, and every drift
    that set off threw away a model that was mostly right (docs/learning-log.md, "Drift")."""
    p = served(y_pred)
    if len(y_true.shape) == 1 or y_true.shape[-1] != p.shape[-1]:  # a class index per row
        index = keras.ops.cast(keras.ops.reshape(y_true, (-1,)), "int32")
        y_true = keras.ops.one_hot(index, p.shape[-1], dtype=p.dtype)
    t = keras.ops.cast(keras.ops.reshape(y_true, (-1, p.shape[-1])), p.dtype)
    return keras.ops.sum(keras.ops.square(p - t), axis=-1)


def head_loss_sums(base: str, y_true: Any, y_pred: Any, sample_weight: Any) -> Any:
    """Each head's loss summed over the batch's rows, weighted, then the served
    prediction's squared error (`served_error`): (heads + 1,)."""
    per = _per_head(base, y_true, y_pred)  # (batch, heads)
    error = keras.ops.reshape(served_error(y_true, y_pred), (-1, 1))
    per = keras.ops.concatenate([per, keras.ops.cast(error, per.dtype)], axis=1)
    w = keras.ops.ones_like(per[:, 0]) if sample_weight is None else sample_weight
    return keras.ops.sum(per * keras.ops.reshape(keras.ops.cast(w, per.dtype), (-1, 1)), axis=0)


@keras.saving.register_keras_serializable(package="streamlearn")
class HeadLosses(keras.metrics.Metric):
    """Each head's loss, its mean over the batch (weighted), then the served prediction's
    squared error: a vector of heads + 1."""

    def __init__(self, base: str, heads: int, **kwargs: Any) -> None:
        super().__init__(name=HEAD_LOSSES, **{k: v for k, v in kwargs.items() if k != "name"})
        self.base = base
        self.heads = heads
        self.total = self.add_variable((heads + 1,), "zeros", name="total")
        self.count = self.add_variable((), "zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        if len(y_pred.shape) != 3:
            return
        self.total.assign_add(head_loss_sums(self.base, y_true, y_pred, sample_weight))
        rows = keras.ops.cast(keras.ops.shape(y_pred)[0], "float32")
        self.count.assign_add(rows if sample_weight is None else keras.ops.sum(sample_weight))

    def result(self):
        return self.total / keras.ops.maximum(self.count, 1e-12)

    def reset_state(self) -> None:
        self.total.assign(keras.ops.zeros((self.heads + 1,)))
        self.count.assign(0.0)

    def get_config(self) -> dict:
        return {**super().get_config(), "base": self.base, "heads": self.heads}


def as_builtin(layer: Heads | HedgeMix, inputs: Any) -> Any:
    """What `layer` computes on `inputs` (inference), as built-in Keras layers holding its
    weights (for `export`): a `Dense` per head, stacked; the mixture as a `Dense` over the
    heads' axis, its kernel the mixture weights."""
    name = layer.name
    if isinstance(layer, Heads):
        stacked = []
        for k, (kernel, bias) in enumerate(layer.blocks()):
            dense = keras.layers.Dense(layer.outputs, name=f"{name}_{k}")
            z = dense(inputs[k])
            dense.set_weights([kernel, bias])
            stacked.append(keras.layers.Reshape((1, layer.outputs), name=f"{name}_{k}_row")(z))
        z = keras.layers.Concatenate(axis=1, name=f"{name}_stacked")(stacked)
        return keras.layers.Activation(layer._activation or "linear", name=f"{name}_out")(z)
    alpha = keras.ops.convert_to_numpy(layer.alpha).reshape(-1, 1)
    dense = keras.layers.Dense(1, use_bias=False, name=name)
    z = dense(keras.layers.Permute((2, 1), name=f"{name}_by_output")(inputs))
    dense.set_weights([alpha])
    return keras.layers.Reshape((int(inputs.shape[-1]),), name=f"{name}_out")(z)


def find(model: keras.Model) -> HedgeMix | None:
    return next((layer for layer in model.layers if isinstance(layer, HedgeMix)), None)


FAVOURED = 3.0  # a favoured head's starting weight, in units of another head's
# The rate's start: over the first `FAST` samples since the prior (or a drift) a unit of
# loss moves the weights by `sqrt(START * ln(heads) / seen)` (the anytime Hedge's
# schedule), then by `-ln(beta)`: kept longer, it cost mixed's samples 200-500 0.010.
START = 8.0
FAST = 100


class Hedge:
    """The mixture weights of one model's `HedgeMix` layer and their updates.

    The exact weights are kept here; the layer's are written only when one has moved by
    `tolerance` (each write is a cost on the step's path on TensorFlow), so they lag by
    less than that. Figures: docs/learning-log.md.
    """

    def __init__(
        self,
        layer: HedgeMix,
        beta: float = 0.9,
        smoothing: float = 0.2,
        tolerance: float = 0.05,
        relative: bool = False,
        favoured: tuple[int, ...] = (),
    ) -> None:
        """`layer`'s weights, set to the prior: every head alike, but the heads `favoured`
        at `FAVOURED` times another's. A fresh model's (a resumed one's are read afterwards)."""
        self.variable = layer.alpha
        self.relative = relative
        self.log_beta = float(np.log(beta))
        self.seen = 0  # samples since the prior (a fresh model's, or a drift's)
        self.tolerance = tolerance
        self.floor = smoothing / layer.heads
        self.prior = np.ones(layer.heads)
        self.prior[list(favoured)] = FAVOURED
        self.prior /= self.prior.sum()
        self.reset()

    def read(self, seen: int | None = None) -> np.ndarray:
        """The weights as the model holds them (after a restore, an undo or a load);
        `seen`: the samples learned before (a resumed learner's, not to start fast again)."""
        if seen is not None:
            self.seen = seen
        served = np.asarray(keras.ops.convert_to_numpy(self.variable), np.float64)
        # the inverse of `served`, to within the floor's renormalisation (a weight raised
        # to the floor sits a little below it once all are renormalised)
        self.alpha = self.written = self.floor + served * (1.0 - len(served) * self.floor)
        return self.alpha

    def update(self, n: int, losses: np.ndarray) -> None:
        """A fresh step over `n` samples had mean loss `losses[k]` for head k."""
        losses = np.asarray(losses, np.float64)
        if not np.all(np.isfinite(losses)):
            return
        if self.relative:  # in units of the heads' mean loss
            losses = losses / max(float(np.mean(losses)), 1e-12)
        self.seen += n
        log_alpha = np.log(self.alpha) - n * self.rate() * losses
        alpha = np.exp(log_alpha - log_alpha.max())
        alpha = np.maximum(alpha / alpha.sum(), self.floor)
        self.alpha = alpha / alpha.sum()
        if np.max(np.abs(self.alpha - self.written) / self.written) >= self.tolerance:
            self._write()

    def rate(self) -> float:
        """How far a unit of loss moves the weights now: fast over the first `FAST`
        samples after the prior, when a few samples tell the heads apart, then `-ln(beta)`."""
        if self.seen > FAST:
            return -self.log_beta
        start = np.sqrt(START * np.log(len(self.prior)) / max(self.seen, 1))
        return max(float(start), -self.log_beta)

    def reset(self) -> None:
        """The weights at the prior (a fresh model's)."""
        self.seen = 0
        self.alpha = self.prior.copy()
        self._write()

    def changed(self) -> None:
        """After a drift: every head alike, as none is known to be better on the new
        concept yet."""
        self.seen = 0
        self.alpha = np.full(len(self.prior), 1.0 / len(self.prior))
        self._write()

    def served(self) -> np.ndarray:
        """The weights the model serves: what each head holds above the floor. The floor
        keeps a head in the race (its weight can grow back); it does not make it serve."""
        above = np.maximum(self.alpha - self.floor, 0.0)
        return above / above.sum()

    def _write(self) -> None:
        self.variable.assign(self.served().astype(np.float32))
        self.written = self.alpha.copy()

    def figures(self) -> dict[str, list[float]]:
        return {"head_weights": [round(float(a), 4) for a in self.alpha]}
