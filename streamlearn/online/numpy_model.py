"""A built-in model's forward pass in numpy alone: what a TensorFlow-free actor serves.

The same function as the Keras model `streamlearn.online.network` builds for a
`ModelSpec`, over the published weights (the codec's named arrays,
`streamlearn.online.codec`), layer by layer in float32: `Standardize`, `Encode`, the
hidden layers (`Dense`, `LSTM`, a causal `Conv1D`), the heads and their mixture
(`hedge`), the steps (`steps`), the memory head (`memory`) and `Unstandardize`. Each
function below is its layer's inference, written as the layer's own `call` is;
`tests/learning/test_numpy_model.py` holds them to the Keras model within 1e-5 for every
architecture and head option.

It imports numpy (and the spec, plain values) only, so an actor loads no TensorFlow and no
Keras (about 600 MB and several seconds less a process), and a device can run the same
file.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from streamlearn.online.spec import ModelSpec

# Shared with the Keras layers, which import them from here (one definition each):
EPSILON = 1e-6  # `standardize`: a variance below it is a constant input
THRESHOLDS = (-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5)  # `steps`: in standard deviations
SHARPNESS = 8.0  # `steps`: a step's slope, from 0.12 to 0.88 over half a deviation
MAX_STEPS_INPUTS = 32  # `steps`: flat inputs beyond which a model has no steps head
ACTIVATIONS = {"regression": None, "binary": "sigmoid", "multiclass": "softmax"}

Spec = dict[str, tuple[tuple[int, ...], np.dtype]]


class NumpyModel:
    """A built-in model's inference over named arrays: `load` them, then call it on rows.

    >>> model = NumpyModel(ModelSpec("binary", 3, hidden=(4,), memory=8))
    >>> model(np.zeros((2, 3), np.float32)).round(6).tolist()  # the initial state: the prior
    [[0.5], [0.5]]
    >>> ", ".join(sorted(model.spec)[:3])  # its weights' names, as Keras names them
    'dense_0/bias, dense_0/kernel, heads/bias'
    """

    def __init__(self, model: ModelSpec) -> None:
        self.model = model  # the network's spec
        self.spec: Spec = _spec(model)
        self.arrays: dict[str, np.ndarray] = initial(model, self.spec)

    def load(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Serve `arrays` (validated against `spec` first: `codec.check_fits`)."""
        self.arrays = {name: np.asarray(arrays[name], np.float32) for name in self.spec}

    def __call__(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            return _forward(self.model, self.arrays, np.asarray(x, np.float32))


def initial(model: ModelSpec, spec: Spec) -> dict[str, np.ndarray]:
    """A fresh model's weights, as far as its predictions go: every head's kernel zero, so
    each predicts the prior (0.5, the classes alike, 0 for a standardised target), and the
    mixture of priors is the prior whatever the hidden layers hold. The reply to a request
    before the first trained version (`version` 0)."""
    arrays = {name: np.zeros(shape, dtype) for name, (shape, dtype) in spec.items()}
    for name in ("standardize/var", "unstandardize/var"):
        if name in arrays:
            arrays[name][...] = 1.0
    if "memory/values" in arrays:
        arrays["memory/values"][...] = _prior(model)
    if "hedge/alpha" in arrays:
        arrays["hedge/alpha"][...] = 1.0 / len(arrays["hedge/alpha"])
    return arrays


# -- the layers' inference, in the order the network applies them ------------------------


def standardize(x: np.ndarray, mean: np.ndarray, var: np.ndarray, keep=()) -> np.ndarray:
    """`Standardize.call`: `(x - mean) / sqrt(var)`, 0 where var is 0, `keep` as they are."""
    spread = var > EPSILON
    scale = np.where(spread, 1.0 / np.sqrt(np.maximum(var, EPSILON)), 0.0).astype(np.float32)
    if not keep:
        return (x - mean) * scale
    kept = np.zeros(x.shape[-1], bool)
    kept[list(keep)] = True
    shift = np.where(kept, 0.0, mean).astype(np.float32)
    return (x - shift) * np.where(kept, 1.0, scale).astype(np.float32)


def unstandardize(z: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """`Unstandardize.call`: `z * sqrt(var) + mean`."""
    return z * np.sqrt(np.maximum(var, EPSILON)) + mean


def encode(x: np.ndarray, categories: tuple[int, ...]) -> np.ndarray:
    """`Encode.call`: NaN -> 0 in the numeric columns, then each categorical one-hot."""
    numeric = [i for i, k in enumerate(categories) if k == 0]
    parts = []
    if numeric:
        numbers = x[..., numeric]
        parts.append(np.where(np.isnan(numbers), 0.0, numbers))
    for i, k in enumerate(categories):
        if k:
            parts.append((x[..., i : i + 1] == np.arange(k)).astype(np.float32))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1).astype(np.float32)


def dense(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray, activation=None) -> np.ndarray:
    return _activate(x @ kernel + bias, activation)


def lstm(x: np.ndarray, kernel, recurrent, bias, sequences: bool = False) -> np.ndarray:
    """Keras's `LSTM` (tanh, sigmoid gates in the order i, f, c, o) over (batch, time, n)."""
    units = recurrent.shape[0]
    h = np.zeros((len(x), units), np.float32)
    c = np.zeros_like(h)
    inputs = x @ kernel + bias  # every step's input part at once
    out = []
    for t in range(x.shape[1]):
        z = inputs[:, t] + h @ recurrent
        i, f, g, o = (z[:, k * units : (k + 1) * units] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.stack(out, axis=1) if sequences else h


def conv1d_causal(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Keras's `Conv1D(padding="causal")` over (batch, time, n), kernel (width, n, filters)."""
    width = kernel.shape[0]
    padded = np.pad(x, ((0, 0), (width - 1, 0), (0, 0)))
    steps = x.shape[1]
    return sum(padded[:, j : j + steps] @ kernel[j] for j in range(width)) + bias


def soft_steps(x: np.ndarray) -> np.ndarray:
    """`Steps.call`: input i's step at threshold j in column i x thresholds + j."""
    scale = np.exp(SHARPNESS * np.asarray(THRESHOLDS)).astype(np.float32)
    e = np.exp(-SHARPNESS * x)[..., None] * scale
    return (1.0 / (1.0 + e)).reshape(len(x), -1)


def heads(taps: list[np.ndarray], kernel, bias, outputs: int, activation) -> np.ndarray:
    """`Heads.call`: head k reads tap k through its diagonal block: (batch, heads, outputs)."""
    z, lo = [], 0
    for k, tap in enumerate(taps):
        hi = lo + tap.shape[-1]
        z.append(tap @ kernel[lo:hi, k * outputs : (k + 1) * outputs])
        lo = hi
    stacked = np.concatenate(z, axis=-1) + bias
    return _activate(stacked.reshape(len(stacked), len(taps), outputs), activation)


def memory(q: np.ndarray, kernel, bias, values) -> np.ndarray:
    """`Memory` at inference: a softmax over the slots, their values weighed: (batch, 1, out)."""
    return (_softmax(q @ kernel + bias) @ values)[:, None, :]


def hedge_mix(stacked: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """`HedgeMix` at inference: `sum_k alpha_k * head_k`."""
    return np.sum(stacked * alpha[:, None], axis=1)


# -- the network -------------------------------------------------------------------------


def _forward(model: ModelSpec, w: Mapping[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    categories = model.categories
    keep = tuple(i for i, k in enumerate(categories or ()) if k)
    h = x
    if model.standardize:
        h = standardize(h, w["standardize/mean"], w["standardize/var"], keep)
    if categories is not None:
        h = encode(h, categories)
    taps = [h.reshape(len(h), -1)]
    if model.architecture == "lstm":
        for i in range(len(model.hidden)):
            last = i == len(model.hidden) - 1
            cell = f"lstm_{i}/lstm_cell"
            h = lstm(
                h, w[f"{cell}/kernel"], w[f"{cell}/recurrent_kernel"], w[f"{cell}/bias"], not last
            )
        taps.append(h)
    elif model.architecture == "conv1d":
        h = _relu(conv1d_causal(h, w["conv_0/kernel"], w["conv_0/bias"]))
        h = h.reshape(len(h), -1)
        for i in range(max(1, len(model.hidden) - 1)):
            h = dense(h, w[f"dense_{i}/kernel"], w[f"dense_{i}/bias"], "relu")
            taps.append(h)
    elif model.architecture == "mlp":
        for i in range(len(model.hidden)):
            h = dense(h, w[f"dense_{i}/kernel"], w[f"dense_{i}/bias"], "relu")
            taps.append(h)
    activation = ACTIVATIONS[model.task]
    if _hedged(model):
        if _stepped(model):
            taps.append(soft_steps(taps[0]))
        out = heads(taps, w["heads/kernel"], w["heads/bias"], model.outputs, activation)
        if model.memory:
            near = memory(taps[0], w["memory/kernel"], w["memory/bias"], w["memory/values"])
            out = np.concatenate([out, near], axis=1)
        y = hedge_mix(out, w["hedge/alpha"])
    else:
        y = dense(taps[-1], w["head/kernel"], w["head/bias"], activation)
    if model.standardize and model.task == "regression":
        y = unstandardize(y, w["unstandardize/mean"], w["unstandardize/var"])
    return y.astype(np.float32, copy=False)


def _spec(model: ModelSpec) -> Spec:
    """Name -> (shape, float32) of every weight, named as Keras names the model's."""
    shapes: dict[str, tuple[int, ...]] = {}
    *steps_of, inputs = model.sample_shape
    window = steps_of[0] if steps_of else 1
    if model.standardize:
        shapes |= {"standardize/mean": (inputs,), "standardize/var": (inputs,)}
        shapes["standardize/count"] = ()
    inputs = _encoded(model)
    tap_widths = [window * inputs]
    width = inputs
    if model.architecture == "lstm":
        for i, units in enumerate(model.hidden):
            cell = f"lstm_{i}/lstm_cell"
            shapes[f"{cell}/kernel"] = (width, 4 * units)
            shapes[f"{cell}/recurrent_kernel"] = (units, 4 * units)
            shapes[f"{cell}/bias"] = (4 * units,)
            width = units
        tap_widths.append(width)
    elif model.architecture in ("conv1d", "mlp"):
        dense_units = model.hidden
        if model.architecture == "conv1d":
            first, *rest = model.hidden
            shapes["conv_0/kernel"] = (min(3, window), inputs, first)
            shapes["conv_0/bias"] = (first,)
            width, dense_units = window * first, tuple(rest or [first])
        for i, units in enumerate(dense_units):
            shapes[f"dense_{i}/kernel"] = (width, units)
            shapes[f"dense_{i}/bias"] = (units,)
            width = units
            tap_widths.append(width)
    outputs = model.outputs
    if _hedged(model):
        if _stepped(model):
            tap_widths.append(tap_widths[0] * len(THRESHOLDS))
        n = len(tap_widths)
        shapes["heads/kernel"] = (sum(tap_widths), n * outputs)
        shapes["heads/bias"] = (n * outputs,)
        if model.memory:
            slots = model.memory
            shapes["memory/kernel"] = (tap_widths[0], slots)
            shapes["memory/bias"] = (slots,)
            shapes["memory/values"] = (slots, outputs)
            n += 1
        shapes["hedge/alpha"] = (n,)
    else:
        shapes["head/kernel"] = (tap_widths[-1], outputs)
        shapes["head/bias"] = (outputs,)
    if model.standardize and model.task == "regression":
        shapes |= {"unstandardize/mean": (1,), "unstandardize/var": (1,)}
        shapes["unstandardize/count"] = ()
    return {name: (shape, np.dtype(np.float32)) for name, shape in shapes.items()}


def _hedged(model: ModelSpec) -> bool:
    """Heads on every layer (`network.build`): a linear model has one head alone."""
    return model.heads == "hedge" and model.architecture != "linear"


def _stepped(model: ModelSpec) -> bool:
    solvable = model.steps and model.standardize and model.task != "multiclass"
    *steps_of, _ = model.sample_shape
    return solvable and (steps_of[0] if steps_of else 1) * _encoded(model) <= MAX_STEPS_INPUTS


def _encoded(model: ModelSpec) -> int:
    """Columns a step has after `Encode` (a categorical input: one a value)."""
    if model.categories is None:
        return model.sample_shape[-1]
    return sum(k or 1 for k in model.categories)


def _prior(model: ModelSpec) -> float:
    return {"binary": 0.5, "multiclass": 1.0 / model.outputs}.get(model.task, 0.0)


def _activate(z: np.ndarray, activation: str | None) -> np.ndarray:
    if activation == "sigmoid":
        return _sigmoid(z)
    if activation == "softmax":
        return _softmax(z)
    if activation == "relu":
        return _relu(z)
    return z


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _relu(z: np.ndarray) -> np.ndarray:
    return np.maximum(z, 0.0)
