"""Checks every sequence architecture passes: it builds, trains on [W, F] windows, and its
weights round-trip through the codec into a second model that then predicts the same."""

from __future__ import annotations

import numpy as np
import pytest

from streamlearn.config import ModelConfig, parse_config
from streamlearn.nn import networks
from streamlearn.online import codec, tensors


def sequence_model(architecture: str, window: int) -> ModelConfig:
    table = {"inputs": 2, "architecture": architecture, "window": window, "hidden": [8, 4]}
    return parse_config({"models": {"s": table}}).model("s")


@pytest.mark.parametrize("architecture", ["lstm", "conv1d"])
@pytest.mark.parametrize("window", [1, 5])
def test_trains_on_windows_and_round_trips_its_weights(architecture, window):
    cfg = sequence_model(architecture, window)
    model = networks.build_model(cfg)
    assert model.input_shape == (None, window, 2) and model.output_shape == (None, 1)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (16, window, 2)).astype(np.float32)
    y = x[:, 0, 0]  # the oldest step's first feature
    before = model.evaluate(x, y, verbose=0, return_dict=True)["loss"]
    for _ in range(30):
        model.train_on_batch(x, y)
    assert model.evaluate(x, y, verbose=0, return_dict=True)["loss"] < before

    arrays, _ = codec.decode(codec.encode(tensors.get_arrays(model)))
    twin = networks.build_model(cfg)
    codec.check_fits(arrays, tensors.spec(twin))
    tensors.set_arrays(twin, arrays)
    np.testing.assert_array_equal(twin.predict_on_batch(x), model.predict_on_batch(x))
