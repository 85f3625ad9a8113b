"""The built-in network of a `ModelSpec`, as a compiled Keras model.

Standardisation (`standardize`) and, for named inputs, imputation and one-hot encoding
(`encode`) first; then the architecture's hidden layers (Dense, LSTM or a causal Conv1D);
then the output: a head on the inputs and after every hidden layer, the soft-steps head
and the memory head, mixed by Hedge (`heads = "hedge"`: `hedge`, `steps`, `memory`), or
one head after the last layer. Layer names are stable, so that weights match across
processes by name (`tensors`), and the numpy forward pass (`numpy_model`) computes the
same function from them.

Only the public `keras` API is used: the same code runs on TensorFlow, JAX or PyTorch.
"""

from __future__ import annotations

from typing import Any

import keras

from streamlearn.online import hedge, steps
from streamlearn.online.encode import Encode
from streamlearn.online.memory import Memory
from streamlearn.online.spec import ModelSpec
from streamlearn.online.standardize import Standardize, Unstandardize

# task -> the output's activation, the loss, the online metric
HEADS = {
    "regression": (None, "mse", "mae"),
    "binary": ("sigmoid", "binary_crossentropy", "binary_accuracy"),
    "multiclass": ("softmax", "sparse_categorical_crossentropy", "sparse_categorical_accuracy"),
}


def build(spec: ModelSpec, one_device: bool = True) -> keras.Model:
    """A compiled model of `spec` (`one_device`: its step compiled by XLA on TensorFlow).

    >>> model = build(ModelSpec(task="binary", inputs=3, hidden=(4,)))
    >>> model.output_shape, model.loss.__class__.__name__
    ((None, 1), 'HeadsLoss')
    """
    activation, loss, metric = HEADS[spec.task]
    inputs = keras.Input(shape=spec.sample_shape, name="x")
    keep = [i for i, k in enumerate(spec.categories or ()) if k]
    h = Standardize(keep, name="standardize")(inputs) if spec.standardize else inputs
    if spec.categories is not None:  # named: missing inputs imputed, categorical ones one-hot
        h = Encode(list(spec.categories), name="encode")(h)
    # what a head may read: the inputs (a linear head), then every hidden layer's output
    taps = [h if len(spec.sample_shape) == 1 else keras.layers.Flatten(name="flat_x")(h)]
    if spec.architecture == "lstm":
        *rest, last = spec.hidden
        for i, units in enumerate(rest):
            h = keras.layers.LSTM(units, return_sequences=True, name=f"lstm_{i}")(h)
        taps.append(keras.layers.LSTM(last, name=f"lstm_{len(rest)}")(h))
    elif spec.architecture == "conv1d":
        taps += _conv1d(h, spec)
    elif spec.architecture == "mlp":
        for i, units in enumerate(spec.hidden):
            h = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(h)
            taps.append(h)
    losses: hedge.HeadsLoss | str
    if spec.heads == "hedge" and len(taps) > 1:  # (a linear model has its inputs alone)
        solvable = spec.steps and spec.standardize and spec.task != "multiclass"
        stepped = steps.tap(taps[0]) if solvable else None  # solved as head 0 is
        if stepped is not None:
            taps.append(stepped)
        heads = hedge.Heads(spec.outputs, activation, name="heads")(taps)
        if spec.memory:  # a nearest-neighbour head on the inputs, after the others
            prior = {"binary": 0.5, "multiclass": 1.0 / spec.outputs}.get(spec.task, 0.0)
            near = Memory(spec.memory, spec.outputs, prior, name="memory")([taps[0], heads])
            heads = keras.layers.Concatenate(axis=1, name="all_heads")([heads, near])
        outputs = hedge.HedgeMix(name="hedge")(heads)
        losses, metrics = hedge.HeadsLoss(loss), [hedge.served_metric(metric)]
        metrics.append(hedge.HeadLosses(loss, len(taps) + (1 if spec.memory else 0)))
    else:
        head = keras.layers.Dense(
            spec.outputs, activation=activation, kernel_initializer="zeros", name="head"
        )
        outputs = head(taps[-1])
        losses, metrics = loss, [metric]
    if spec.standardize and spec.task == "regression":
        outputs = Unstandardize(name="unstandardize")(outputs)
    model = keras.Model(inputs, outputs, name=spec.name)
    optimizer = {"adam": keras.optimizers.Adam, "sgd": keras.optimizers.SGD}[spec.optimizer]
    opt = optimizer(spec.learning_rate, global_clipnorm=spec.clip_norm)
    model.compile(
        optimizer=opt, loss=losses, weighted_metrics=metrics, jit_compile=_jit(one_device)
    )
    return model


def _jit(one_device: bool) -> bool | str:
    """XLA for a built-in model's training step on TensorFlow on one device: it fuses the
    step's many small operations (a hedge model's heads, their losses) into a few kernels,
    which shortens a step on CPU, where Keras leaves it off (figures:
    docs/learning-log.md). It compiles once per bucket size, at warm-up. Elsewhere Keras
    decides ("auto")."""
    return True if keras.backend.backend() == "tensorflow" and one_device else "auto"


def _conv1d(h: Any, spec: ModelSpec) -> list[Any]:
    """A causal convolution over the window, flattened, then dense layers: their outputs.

    Flatten rather than pooling keeps where in the window a pattern sits (a lag is a
    position), which pooling would average away; the windows are short, so it stays small.
    """
    first, *rest = spec.hidden
    kernel = min(3, spec.window or 1)
    h = keras.layers.Conv1D(first, kernel, padding="causal", activation="relu", name="conv_0")(h)
    h = keras.layers.Flatten(name="flatten")(h)
    taps = []
    for i, units in enumerate(rest or [first]):
        h = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(h)
        taps.append(h)
    return taps


def metric_of_loss(loss: str) -> str:
    """The metric a built-in model compiles with `loss`."""
    return next(metric for _, base, metric in HEADS.values() if base == loss)


def head_metric(task: str) -> str:
    """The metric a built-in model of `task` compiles (its name in the step's logs)."""
    return HEADS[task][2]
