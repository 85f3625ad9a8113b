"""Keras models from config, and moving their weights in and out as named arrays.

Only the public `keras` API is used, so the same code runs on the TensorFlow, JAX or
PyTorch backend.
"""

from __future__ import annotations

import importlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from streamlearn.config import ModelConfig  # noqa: E402
from streamlearn.errors import ConfigError, WeightsError  # noqa: E402

_HEADS = {
    "regression": (None, "mse", "mae"),
    "binary": ("sigmoid", "binary_crossentropy", "binary_accuracy"),
    "multiclass": ("softmax", "sparse_categorical_crossentropy", "sparse_categorical_accuracy"),
}


def build_model(cfg: ModelConfig) -> keras.Model:
    """A compiled model for `cfg`, with stable layer names so weights match across processes."""
    if cfg.factory:
        return _from_factory(cfg)
    activation, loss, metric = _HEADS[cfg.task]
    inputs = keras.Input(shape=cfg.sample_shape, name="x")
    h = inputs
    if cfg.architecture == "lstm":
        *rest, last = cfg.hidden
        for i, units in enumerate(rest):
            h = keras.layers.LSTM(units, return_sequences=True, name=f"lstm_{i}")(h)
        h = keras.layers.LSTM(last, name=f"lstm_{len(rest)}")(h)
    elif cfg.architecture == "mlp":
        for i, units in enumerate(cfg.hidden):
            h = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(h)
    outputs = keras.layers.Dense(cfg.outputs, activation=activation, name="head")(h)
    model = keras.Model(inputs, outputs, name=cfg.name)
    optimizer = {"adam": keras.optimizers.Adam, "sgd": keras.optimizers.SGD}[cfg.optimizer]
    model.compile(optimizer=optimizer(cfg.learning_rate), loss=loss, weighted_metrics=[metric])
    return model


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


def get_arrays(model: keras.Model) -> dict[str, np.ndarray]:
    """The model's weights by variable path (copies)."""
    return {v.path: np.array(keras.ops.convert_to_numpy(v)) for v in model.weights}


def spec(model: keras.Model) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Expected name -> (shape, dtype) of every weight, to validate a blob against."""
    return {v.path: (tuple(v.shape), np.dtype(v.dtype)) for v in model.weights}


def set_arrays(model: keras.Model, arrays: dict[str, np.ndarray]) -> None:
    """Load named arrays (already validated with `codec.check_fits`)."""
    try:
        for v in model.weights:
            v.assign(arrays[v.path])
    except KeyError as exc:
        raise WeightsError(f"missing weight {exc}") from None


def training_variables(model: keras.Model) -> list[keras.Variable]:
    """Weights plus optimizer state: what a rollback or checkpoint must restore."""
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    return list(model.weights) + list(model.optimizer.variables)


def snapshot(variables: list[keras.Variable]) -> list[np.ndarray]:
    return [np.array(keras.ops.convert_to_numpy(v)) for v in variables]


def restore(variables: list[keras.Variable], values: list[np.ndarray]) -> None:
    for var, value in zip(variables, values, strict=True):
        var.assign(value)
