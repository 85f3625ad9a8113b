"""Depth that adapts: an output head on the inputs and after every hidden layer, mixed.

Hedge Backpropagation (Sahoo et al., IJCAI 2018, arXiv 1711.03705), the built-in
architectures' default (`heads = "hedge"`): head 0 reads the standardised inputs (a linear
model, or a logistic one), head k the k-th hidden layer's output. The model serves
`sum_k alpha_k * head_k`; the mixture weights `alpha` are a weight of the `HedgeMix`
layer (`hedge/alpha`), published with the others, so the actors serve exactly what the
learner scores, and `export` writes them as built-in layers (`standalone`).

Training learns every head on its own loss, their mean the training loss: shallow heads
learn fast and carry the prediction at the start of a stream and after a change, deeper
ones take over as the concept needs them. The learner moves `alpha` by Hedge on each
head's loss, outside the compiled step (`streamlearn.online.hedge`), so the step is the
same on every backend.

In training, `HedgeMix` outputs the mixture and the heads stacked, (batch, 1 + heads,
outputs): the loss (`HeadsLoss`) reads the heads, the compiled metric (`served`) the
mixture, and `HeadLosses` each head's mean loss for the learner's Hedge update.

Hedge: the learner moves a hedge model's mixture weights by each head's loss.

After every fresh step (scored before it learned), each head k's weight is multiplied by
`beta ** (n * loss_k)` for the step's n samples and mean loss `loss_k`, as Hedge does a
sample at a time; then every weight is raised to at least `smoothing / heads` (so a head
out of favour can come back after a change) and the weights renormalised (Sahoo et al.,
2018, smoothing 0.2). Their beta, 0.99, is this module's 0.9: a head better by 0.05 of
loss a sample then wins in ~50 samples rather than ~500, and with the solved linear head
(`linear`) the quality bench gained on every linear concept (hyperplane 0.907 -> 0.918)
and on mixed_drift and sine_drift (+0.01 each), losing no stream by more than 0.002 but
breast_cancer. Replayed steps do not count: their samples were learned.

A regression's losses (squared errors, in the target's units) are taken relative to the
heads' mean loss of the step (`relative`): in target units beta's pace depended on the
target's scale. Diabetes (a target of ~150, squared errors ~3,000) followed whichever
head won the last message; a noise-free linear target (squared errors ~1e-4 once
learned) never moved the weights, so the deep heads kept the share they had after the
first messages: linear4's MAE was 0.035 to 0.050 by seed, and is 0.035 to 0.037.

The model serves each head's weight above the floor (`served`), renormalised: the floor
keeps a head able to come back, but a head held there does not serve. With the memory
head (`streamlearn.online.memory`) the floors of three heads out of favour made linear4's MAE
0.049 where the solved linear head alone reaches 0.033; served above the floor, 0.035.

The weights start from a prior (`prior`): a model whose head 0 is solved over the replay
buffer (`linear`) starts it at `FAVOURED` times another head's weight, the others alike.
That head is fitted to every sample so far from the first message on, while the hidden
layers' heads start from zero and learn at the optimizer's pace; a uniform start served them
a quarter each on the second message, when they had seen one step. In-process on the quality
bench, seeds 0-1, against a uniform start: sea 0.873 -> 0.875, sea_drift 0.869 -> 0.872,
linear4's MAE 0.034 -> 0.032, hyperplane +0.001; agrawal_drift -0.001, sine_drift -0.001,
breast_cancer -0.002 (2 of 569 samples). Tried at 3 with the memory head at 2 (sea_drift
+0.001 more, agrawal_drift -0.001 more) and at 5 (linear4 0.031, but sea_drift,
agrawal_drift and breast_cancer lower).

After a drift the weights are uniform (`changed`), not the prior: every head then starts
from zero on the same few samples of the new concept (the drift step the buffer kept), and
the hidden layers' heads read features learned over the whole stream, so the linear head has
no head start to reward. Back to the prior instead, breast_cancer_swap served the linear
head's fit to one message's worth of swapped labels. In-process, seeds 0-1, against the
prior: breast_cancer_swap 0.853 -> 0.864, friedman_drift's MAE 1.775 -> 1.763, agrawal_drift
0.904 -> 0.905, sine_drift 0.961 -> 0.962, stagger_drift 0.984 -> 0.985, mixed_drift
-0.0003; the streams with no drift unchanged. Chosen by replaying the heads' recorded
outputs through both rules first: the weights move only what is served, never what a head
learns.

Other rules were tried the same way (`python -m bench.hedge_rules --rule '{"beta": 0.98}'`:
the heads' outputs recorded in-process on all 23 streams of the quality bench, seeds 0-1,
40-sample messages, and replayed through each rule). The served mixture is within 0.003 of
its best single head on every stream but breast_cancer (0.921 against a hidden layer's
head's 0.929, whose log loss is worse), breast_cancer_swap (-0.005) and wine (-0.014) (and
diabetes, an MAE 0.11 above its linear head's), and no rule gained 0.002 on a stream
without losing as much on another: Brier's loss (sea_drift -0.004, sea -0.002;
agrawal_drift +0.002, wine +0.003), the 0-1 loss (digits -0.006, wine +0.003), log loss
mixed with it (half and half: sea_drift +0.002, the rest within 0.001; a fifth of log loss:
digits -0.003), beta 0.85 to 0.98 (at 0.98: agrawal and agrawal_drift -0.004, mixed_drift
-0.005, for diabetes' MAE 0.3 lower), smoothing 0.1, a favoured head at 5, and AdaHedge (de
Rooij et al., 2014; sea -0.003, digits -0.005). One sample a message (`--message-size 1`),
on the three small tables, beta 0.98 gained (breast_cancer 0.955 -> 0.961, wine 0.935 ->
0.947, diabetes 50.0 -> 49.0); it stays at 0.9, which the 40-sample messages of the bench
(and of a fleet's batches) favour.

The weights live in the model (`streamlearn.online.hedge.HedgeMix`, `hedge/alpha`), so they are
published, checkpointed and undone with the rest. Writing them costs ~0.2 ms on the
TensorFlow backend, so they are written only when one has moved by 5% or more since the
last write; the exact values are kept here and the written ones lag by less than that.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

HEAD_LOSSES = "head_losses"  # the log of each head's mean loss over the step's batch
# The per-row form of each built-in head's metric (`networks._HEADS`), by its log name.
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
    instead of one per head, which halves what the heads add to a step (each variable
    costs the optimizer's update and the step's finiteness check a few operations).

    Each head is computed from its block alone: a head of one output as its tap times a
    row of weights, summed (one loop that XLA fuses with the activation and the loss), a
    head of several as a matrix product. One product of all taps side by side against
    the kernel masked to its blocks, as it was, is a (rows x 137) by (137 x 3) GEMM for
    `bench.learner`'s 9-64-64 model, which made a 256-sample step 1.42 ms against the one-
    head model's 1.05 ms on 2 cores; computed by blocks, 1.09 ms against 1.09 ms.
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
    learner sets its prior: `streamlearn.online.hedge`)."""

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


def head_loss_sums(base: str, y_true: Any, y_pred: Any, sample_weight: Any) -> Any:
    """Each head's loss summed over the batch's rows, weighted: (heads,)."""
    per = _per_head(base, y_true, y_pred)  # (batch, heads)
    w = keras.ops.ones_like(per[:, 0]) if sample_weight is None else sample_weight
    return keras.ops.sum(per * keras.ops.reshape(keras.ops.cast(w, per.dtype), (-1, 1)), axis=0)


@keras.saving.register_keras_serializable(package="streamlearn")
class HeadLosses(keras.metrics.Metric):
    """Each head's loss, its mean over the batch (weighted): a vector, one per head."""

    def __init__(self, base: str, heads: int, **kwargs: Any) -> None:
        super().__init__(name=HEAD_LOSSES, **{k: v for k, v in kwargs.items() if k != "name"})
        self.base = base
        self.heads = heads
        self.total = self.add_variable((heads,), "zeros", name="total")
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
        self.total.assign(keras.ops.zeros((self.heads,)))
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


class Hedge:
    """The mixture weights of one model's `HedgeMix` layer and their updates."""

    def __init__(
        self,
        layer: HedgeMix,
        beta: float = 0.9,
        smoothing: float = 0.2,
        tolerance: float = 0.05,
        relative: bool = False,
        favoured: int | None = None,
    ) -> None:
        """`layer`'s weights, set to the prior: every head alike, or head `favoured` at
        `FAVOURED` times another's. A fresh model's (a resumed one's are read afterwards)."""
        self.variable = layer.alpha
        self.relative = relative
        self.log_beta = float(np.log(beta))
        self.tolerance = tolerance
        self.floor = smoothing / layer.heads
        self.prior = np.ones(layer.heads)
        if favoured is not None:
            self.prior[favoured] = FAVOURED
        self.prior /= self.prior.sum()
        self.reset()

    def read(self) -> np.ndarray:
        """The weights as the model holds them (after a restore, an undo or a load)."""
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
        log_alpha = np.log(self.alpha) + n * self.log_beta * losses
        alpha = np.exp(log_alpha - log_alpha.max())
        alpha = np.maximum(alpha / alpha.sum(), self.floor)
        self.alpha = alpha / alpha.sum()
        if np.max(np.abs(self.alpha - self.written) / self.written) >= self.tolerance:
            self._write()

    def reset(self) -> None:
        """The weights at the prior (a fresh model's)."""
        self.alpha = self.prior.copy()
        self._write()

    def changed(self) -> None:
        """After a drift: every head alike, as none is known to be better on the new
        concept yet."""
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
