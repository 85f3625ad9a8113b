"""Model factories used by the tests (`factory = "tests.factories:NAME"`)."""

from __future__ import annotations

import keras

from streamlearn.config import ModelConfig


def tiny_regressor(cfg: ModelConfig) -> keras.Model:
    """A user's own architecture: a normalisation layer (with a scalar `count` weight)."""
    inputs = keras.Input(shape=cfg.sample_shape, name="x")
    h = keras.layers.Normalization(mean=0.0, variance=1.0, name="norm")(inputs)
    h = keras.layers.Dense(16, activation="tanh", name="hidden")(h)
    outputs = keras.layers.Dense(1, name="out")(h)
    model = keras.Model(inputs, outputs, name=cfg.name)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse", weighted_metrics=["mae"])
    return model
