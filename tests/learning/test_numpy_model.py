"""The TensorFlow-free forward pass (`streamlearn.online.numpy_model`) against the Keras
model it stands for: the same weight names and shapes, and the same predictions within
1e-5, for every built-in architecture and head option, over random weights."""

from __future__ import annotations

import numpy as np
import pytest

from streamlearn.config.app import ModelConfig
from streamlearn.nn import networks
from streamlearn.online import tensors
from streamlearn.online.numpy_model import NumpyModel

CASES = {
    "mlp binary (hedge, steps, memory)": dict(inputs=4, task="binary"),
    "mlp regression": dict(inputs=3, task="regression", hidden=[8, 5]),
    "mlp multiclass": dict(inputs=3, task="multiclass", classes=4, hidden=[8]),
    "mlp no steps, no memory": dict(inputs=3, task="binary", steps=False, memory=0),
    "mlp last head": dict(inputs=3, task="regression", heads="last", hidden=[6]),
    "mlp not standardised": dict(inputs=3, task="binary", standardize=False, hidden=[6]),
    "mlp over 32 inputs (no steps)": dict(inputs=40, task="binary", hidden=[6]),
    "linear": dict(inputs=3, task="binary", architecture="linear"),
    "linear regression": dict(inputs=3, task="regression", architecture="linear"),
    "lstm regression": dict(
        inputs=3, task="regression", architecture="lstm", window=4, hidden=[5, 6]
    ),
    "lstm multiclass last": dict(
        inputs=2,
        task="multiclass",
        classes=3,
        architecture="lstm",
        window=3,
        hidden=[4],
        heads="last",
    ),
    "conv1d binary": dict(inputs=3, task="binary", architecture="conv1d", window=4, hidden=[5, 6]),
    "conv1d one layer, last": dict(
        inputs=2, task="regression", architecture="conv1d", window=2, hidden=[3], heads="last"
    ),
    "named and categorical": dict(
        inputs=["t", "c", "v"], task="binary", categorical={"c": ["x", "y", "z"]}, hidden=[6]
    ),
    "named multiclass": dict(
        inputs=["t", "c"], task="multiclass", classes=3, categorical={"c": ["x", "y"]}, hidden=[6]
    ),
}


def _inputs(cfg: ModelConfig, rng: np.random.Generator, rows: int = 33) -> np.ndarray:
    x = rng.normal(0.5, 2.0, (rows, *cfg.sample_shape)).astype(np.float32)
    for i, k in enumerate(cfg.categories):
        if k:  # a category's index, -1 for one not configured
            x[..., i] = rng.integers(-1, k, x.shape[:-1])
    if cfg.fields is not None:  # a missing named input
        x[::5, ..., 0] = np.nan
    return x


@pytest.mark.parametrize("case", list(CASES))
def test_the_numpy_forward_pass_is_the_keras_models(case):
    cfg = ModelConfig(name="m", **CASES[case])
    keras_model = networks.build_model(cfg)
    served = NumpyModel(cfg.spec)
    assert served.spec == tensors.spec(keras_model), "weight names and shapes differ"
    rng = np.random.default_rng(0)
    x = _inputs(cfg, rng)
    # the initial state: both predict the prior
    np.testing.assert_allclose(served(x), keras_model.predict_on_batch(x), atol=1e-5)
    arrays = {}
    for name, value in tensors.get_arrays(keras_model).items():
        arrays[name] = rng.normal(0, 0.5, value.shape).astype(np.float32)
        if name.endswith("/var"):
            arrays[name] = np.abs(arrays[name]) + (name.startswith("standardize") and 0.0)
        if name == "hedge/alpha":
            arrays[name] = np.abs(arrays[name]) / np.abs(arrays[name]).sum()
    if "standardize/var" in arrays:
        arrays["standardize/var"][0] = 0.0  # a constant input: centred to 0
    tensors.set_arrays(keras_model, arrays)
    served.load(arrays)
    expected = keras_model.predict_on_batch(x)
    got = served(x)
    assert got.shape == expected.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
