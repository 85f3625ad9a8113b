"""Model factories used by the tests (`factory = "tests.factories:NAME"`), and what the
tests read back of the service's Redis structures."""

from __future__ import annotations

import keras
import redis

from streamlearn.config import ModelConfig
from streamlearn.contract.names import Names


def tiny_regressor(cfg: ModelConfig) -> keras.Model:
    """A user's own architecture: a normalisation layer (with a scalar `count` weight)."""
    inputs = keras.Input(shape=cfg.sample_shape, name="x")
    h = keras.layers.Normalization(mean=0.0, variance=1.0, name="norm")(inputs)
    h = keras.layers.Dense(16, activation="tanh", name="hidden")(h)
    outputs = keras.layers.Dense(1, name="out")(h)
    model = keras.Model(inputs, outputs, name=cfg.name)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse", weighted_metrics=["mae"])
    return model


def deadletters(client: redis.Redis, names: Names, count: int = 100) -> list[dict]:
    """The newest `count` dead letters of `names`' model, oldest first: their fields as
    text, the payload as bytes."""
    rows = client.xrevrange(names.deadletter_key, count=count)
    return [
        {k.decode(): (v if k == b"payload" else v.decode()) for k, v in f.items()}
        for _, f in reversed(rows)
    ]
