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
head's loss, outside the compiled step (`streamlearn.learner.mixing`), so the step is the
same on every backend.

In training, `HedgeMix` outputs the mixture and the heads stacked, (batch, 1 + heads,
outputs): the loss (`HeadsLoss`) reads the heads, the compiled metric (`served`) the
mixture, and `HeadLosses` each head's mean loss for the learner's Hedge update.
"""

from __future__ import annotations

from typing import Any

import keras

HEAD_LOSSES = "head_losses"  # the log of each head's mean loss over the step's batch


@keras.saving.register_keras_serializable(package="streamlearn")
class HedgeMix(keras.layers.Layer):
    """`sum_k alpha_k * head_k`, alpha a non-trainable weight (uniform at start)."""

    def build(self, input_shape: Any) -> None:
        self.heads = len(input_shape)
        self.alpha = self.add_weight(
            shape=(self.heads,),
            initializer=keras.initializers.Constant(1.0 / self.heads),
            trainable=False,
            name="alpha",
        )

    def call(self, heads, training=None):  # type: ignore[no-untyped-def]
        stacked = keras.ops.stack(heads, axis=1)  # (batch, heads, outputs)
        mix = keras.ops.einsum("bko,k->bo", stacked, keras.ops.cast(self.alpha, stacked.dtype))
        if training:
            return keras.ops.concatenate([mix[:, None, :], stacked], axis=1)
        return mix

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return tuple(input_shape[0])


def served(y_pred: Any) -> Any:
    """The served prediction in a model's output: the mixture of a training output."""
    return y_pred[:, 0] if len(y_pred.shape) == 3 else y_pred


def _per_head(loss: Any, y_true: Any, y_pred: Any) -> list[Any]:
    """Each head's per-sample loss, from a training output."""
    return [loss(y_true, y_pred[:, k]) for k in range(1, y_pred.shape[1])]


@keras.saving.register_keras_serializable(package="streamlearn")
class HeadsLoss(keras.losses.Loss):
    """The mean of the heads' losses (training), or the served prediction's loss."""

    def __init__(self, base: str, **kwargs: Any) -> None:
        super().__init__(name=kwargs.pop("name", base), **kwargs)
        self.base = base
        self.fn = keras.losses.get(base)

    def call(self, y_true, y_pred):  # type: ignore[no-untyped-def]
        if len(y_pred.shape) != 3:
            return self.fn(y_true, y_pred)
        losses = _per_head(self.fn, y_true, y_pred)
        return keras.ops.mean(keras.ops.stack(losses, axis=0), axis=0)

    def get_config(self) -> dict:
        return {**super().get_config(), "base": self.base}


def served_metric(name: str) -> keras.metrics.Metric:
    """The compiled metric `name` (binary_accuracy, mae, ...) on the served prediction."""
    fn = getattr(keras.metrics, {"mae": "mean_absolute_error"}.get(name, name))
    return keras.metrics.MeanMetricWrapper(lambda t, p: fn(t, served(p)), name=name)


class HeadLosses(keras.metrics.Metric):
    """Each head's loss, its mean over the batch (weighted): a vector, one per head."""

    def __init__(self, base: str, heads: int) -> None:
        super().__init__(name=HEAD_LOSSES)
        self.fn = keras.losses.get(base)
        self.heads = heads
        self.total = self.add_variable((heads,), "zeros", name="total")
        self.count = self.add_variable((), "zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):  # type: ignore[no-untyped-def]
        if len(y_pred.shape) != 3:
            return
        per = keras.ops.stack(_per_head(self.fn, y_true, y_pred), axis=1)  # (batch, heads)
        w = keras.ops.ones_like(per[:, 0]) if sample_weight is None else sample_weight
        w = keras.ops.reshape(keras.ops.cast(w, per.dtype), (-1, 1))
        self.total.assign_add(keras.ops.sum(per * w, axis=0))
        self.count.assign_add(keras.ops.sum(w))

    def result(self):  # type: ignore[no-untyped-def]
        return self.total / keras.ops.maximum(self.count, 1e-12)

    def reset_state(self) -> None:
        self.total.assign(keras.ops.zeros((self.heads,)))
        self.count.assign(0.0)


def find(model: keras.Model) -> HedgeMix | None:
    return next((layer for layer in model.layers if isinstance(layer, HedgeMix)), None)
