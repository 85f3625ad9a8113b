"""Keras models from config: the built-in architectures, a factory's model, the strategy.

Moving a model's weights in and out as named arrays is `streamlearn.online.tensors`'s.

Only the public `keras` API is used, so the same code runs on the TensorFlow, JAX or
PyTorch backend (data-parallel training through `tf.distribute` is TensorFlow's own).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# On a GPU, JAX and TensorFlow each take most of the device's memory in the first process
# that touches it, so a second (an actor beside the learner) fails with out-of-memory.
# Allocate what is used instead; set these variables to override.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")

import keras  # noqa: E402

from streamlearn.config.app import ModelConfig
from streamlearn.config.policies import LearnerConfig  # noqa: E402
from streamlearn.config.tfconfig import Workers  # noqa: E402
from streamlearn.errors import ConfigError  # noqa: E402
from streamlearn.nn.encode import Encode  # noqa: E402
from streamlearn.online import hedge, steps, tensors  # noqa: E402
from streamlearn.online.memory import Memory  # noqa: E402
from streamlearn.online.standardize import Standardize, Unstandardize  # noqa: E402

_HEADS = {
    "regression": (None, "mse", "mae"),
    "binary": ("sigmoid", "binary_crossentropy", "binary_accuracy"),
    "multiclass": ("softmax", "sparse_categorical_crossentropy", "sparse_categorical_accuracy"),
}


def build_model(cfg: ModelConfig, strategy: Any = None) -> keras.Model:
    """A compiled model for `cfg`, with stable layer names so weights match across processes.

    With a `tf.distribute` strategy, its variables (optimizer's included) are mirrored.
    """
    if strategy is None:
        return _build(cfg)
    with strategy.scope():
        model = _build(cfg)
        tensors.training_variables(model)
        return model


def _build(cfg: ModelConfig) -> keras.Model:
    if cfg.factory:
        if cfg.learner.clip_norm is not None:
            raise ConfigError(
                f"models.{cfg.name}.learner.clip_norm: applies to built-in architectures; "
                f"set global_clipnorm on the optimizer {cfg.factory} returns, got "
                f"{cfg.learner.clip_norm}"
            )
        return _from_factory(cfg)
    activation, loss, metric = _HEADS[cfg.task]
    inputs = keras.Input(shape=cfg.sample_shape, name="x")
    keep = [i for i, k in enumerate(cfg.categories) if k]
    h = Standardize(keep, name="standardize")(inputs) if cfg.standardize else inputs
    if cfg.fields is not None:  # named: missing inputs imputed, categorical ones one-hot
        h = Encode(cfg.categories, name="encode")(h)
    # what a head may read: the inputs (a linear head), then every hidden layer's output
    taps = [h if len(cfg.sample_shape) == 1 else keras.layers.Flatten(name="flat_x")(h)]
    if cfg.architecture == "lstm":
        *rest, last = cfg.hidden
        for i, units in enumerate(rest):
            h = keras.layers.LSTM(units, return_sequences=True, name=f"lstm_{i}")(h)
        taps.append(keras.layers.LSTM(last, name=f"lstm_{len(rest)}")(h))
    elif cfg.architecture == "conv1d":
        taps += _conv1d(h, cfg)
    elif cfg.architecture == "mlp":
        for i, units in enumerate(cfg.hidden):
            h = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(h)
            taps.append(h)
    losses: hedge.HeadsLoss | str
    if cfg.heads == "hedge" and len(taps) > 1:  # (a linear model has its inputs alone)
        solvable = cfg.steps and cfg.standardize and cfg.task != "multiclass"
        stepped = steps.tap(taps[0]) if solvable else None  # solved as head 0 is
        if stepped is not None:
            taps.append(stepped)
        heads = hedge.Heads(cfg.outputs, activation, name="heads")(taps)
        if cfg.memory_slots:  # a nearest-neighbour head on the inputs, after the others
            prior = {"binary": 0.5, "multiclass": 1.0 / cfg.outputs}.get(cfg.task, 0.0)
            near = Memory(cfg.memory_slots, cfg.outputs, prior, name="memory")([taps[0], heads])
            heads = keras.layers.Concatenate(axis=1, name="all_heads")([heads, near])
        outputs = hedge.HedgeMix(name="hedge")(heads)
        losses, metrics = hedge.HeadsLoss(loss), [hedge.served_metric(metric)]
        metrics.append(hedge.HeadLosses(loss, len(taps) + (1 if cfg.memory_slots else 0)))
    else:
        head = keras.layers.Dense(
            cfg.outputs, activation=activation, kernel_initializer="zeros", name="head"
        )
        outputs = head(taps[-1])
        losses, metrics = loss, [metric]
    if cfg.standardize and cfg.task == "regression":
        outputs = Unstandardize(name="unstandardize")(outputs)
    model = keras.Model(inputs, outputs, name=cfg.name)
    optimizer = {"adam": keras.optimizers.Adam, "sgd": keras.optimizers.SGD}[cfg.optimizer]
    opt = optimizer(cfg.learning_rate, global_clipnorm=cfg.learner.clip_norm)
    model.compile(optimizer=opt, loss=losses, weighted_metrics=metrics, jit_compile=_jit(cfg))
    return model


def _jit(cfg: ModelConfig) -> bool | str:
    """XLA for a built-in model's training step on TensorFlow on one device: it fuses the
    step's many small operations (a hedge model's heads, their losses) into a few kernels,
    which shortens a step on CPU, where Keras leaves it off (figures:
    docs/learning-log.md). It compiles once per bucket size, at warm-up. Elsewhere Keras
    decides ("auto")."""
    one_device = cfg.learner.distribute == "none"
    return True if keras.backend.backend() == "tensorflow" and one_device else "auto"


def _conv1d(h: Any, cfg: ModelConfig) -> list[Any]:
    """A causal convolution over the window, flattened, then dense layers: their outputs.

    Flatten rather than pooling keeps where in the window a pattern sits (a lag is a
    position), which pooling would average away; the windows are short, so it stays small.
    """
    first, *rest = cfg.hidden
    kernel = min(3, cfg.window or 1)
    h = keras.layers.Conv1D(first, kernel, padding="causal", activation="relu", name="conv_0")(h)
    h = keras.layers.Flatten(name="flatten")(h)
    taps = []
    for i, units in enumerate(rest or [first]):
        h = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(h)
        taps.append(h)
    return taps


def metric_of_loss(loss: str) -> str:
    """The metric a built-in model compiles with `loss`."""
    return next(metric for _, base, metric in _HEADS.values() if base == loss)


def head_metric(task: str) -> str:
    """The metric a built-in model of `task` compiles (its name in the step's logs)."""
    return _HEADS[task][2]


def distribution(cfg: LearnerConfig) -> Any:
    """The `tf.distribute` strategy the learner trains under, or None (one device):
    `MirroredStrategy` over this host's devices, or `MultiWorkerMirroredStrategy` over the
    workers `TF_CONFIG` names (`streamlearn.learner.collective`)."""
    if cfg.distribute == "none":
        return None
    if keras.backend.backend() != "tensorflow":
        raise ConfigError(
            f"learner.distribute: {cfg.distribute!r} needs the tensorflow backend, "
            f"got {keras.backend.backend()!r}"
        )
    import tensorflow as tf

    if cfg.distribute == "multi_worker":
        Workers.from_env()  # a ConfigError, not TensorFlow's, when TF_CONFIG is missing
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.MirroredStrategy(list(cfg.devices) or None)


def _from_factory(cfg: ModelConfig) -> keras.Model:
    module_name, _, func_name = (cfg.factory or "").partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"models.{cfg.name}.factory: cannot load {cfg.factory!r}: {exc}"
        ) from None
    model = factory(cfg)
    if not isinstance(model, keras.Model) or model.optimizer is None:
        raise ConfigError(
            f"models.{cfg.name}.factory: {cfg.factory} must return a compiled keras.Model"
        )
    return model
