"""The steps head's inputs: each standardised input through soft steps at fixed thresholds.

A linear head draws one boundary across the inputs; a concept that holds in an interval of
one input (an age band, a temperature range) is out of its reach, and the hidden layers
learn it at the optimizer's pace, hundreds of samples. A tree splits it within tens. A
linear head over steps of each input, `sigmoid(SHARPNESS * (x_i - t))` for each threshold
t of `THRESHOLDS` (in standard deviations), draws any piecewise function of each input
added up, and is solved over the replay buffer as the linear head is
(`streamlearn.online.linear`), each input's steps penalised the more the less of the
target they explain on their own (`relevance`): of nine inputs, one carrying an age band,
the other eight's steps would otherwise fit the noise of the first few dozen samples.

The steps are a layer without weights (`Steps`): the same sigmoids from one exponential an
input, scaled for each threshold, rather than one a step (as a sigmoid `Dense`, those were
most of what the steps head added to a training step); `export` writes them as a sigmoid
`Dense` of fixed weights (`as_builtin`). Their width is inputs x thresholds; a model of
more than `MAX_INPUTS` flat inputs has no steps head (its solve would cost too much).
Figures: docs/learning-log.md, "The start" and "The step's cost".
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

# THRESHOLDS: in standard deviations of an input; SHARPNESS: a step's slope, from 0.12 to
# 0.88 over half a standard deviation; MAX_INPUTS: flat inputs beyond which a model has no
# steps head. Defined with the numpy forward pass, which serves the steps without Keras.
from streamlearn.online.numpy_model import MAX_STEPS_INPUTS as MAX_INPUTS  # noqa: E402
from streamlearn.online.numpy_model import SHARPNESS, THRESHOLDS  # noqa: E402, F401

LEAST_RELEVANCE = 0.01  # an input's penalty is at most 1 / sqrt(this) times the most relevant's
NAME = "steps"


@keras.saving.register_keras_serializable(package="streamlearn")
class Steps(keras.layers.Layer):
    """(batch, n) standardised inputs -> (batch, n x thresholds): column i x k + j is
    `sigmoid(SHARPNESS * (x_i - THRESHOLDS[j]))`, input i's step at threshold j."""

    def call(self, x):
        x = keras.ops.stop_gradient(x)  # fixed features: nothing below them learns by them
        scale = np.exp(SHARPNESS * np.asarray(THRESHOLDS)).astype(np.float32)
        # exp(-S x) * exp(S t) = exp(-S (x - t)): one exponential an input, not a threshold;
        # overflowing to inf far below a threshold, the step is 0 there, as it should be
        e = keras.ops.exp(-SHARPNESS * x)[..., None] * scale
        return keras.ops.reshape(1.0 / (1.0 + e), (-1, x.shape[-1] * len(THRESHOLDS)))

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return (input_shape[0], input_shape[-1] * len(THRESHOLDS))


def tap(inputs: Any) -> Any | None:
    """The steps of `inputs` (batch, n), standardised: (batch, n x thresholds); None when
    n is over `MAX_INPUTS`."""
    if int(inputs.shape[-1]) > MAX_INPUTS:
        return None
    return Steps(name=NAME)(inputs)


def output(model: keras.Model) -> Any | None:
    """`model`'s steps (what its steps head reads); None for a model without them."""
    names = {layer.name for layer in model.layers}
    return model.get_layer(NAME).output if NAME in names else None


def as_builtin(layer: Steps, inputs: Any) -> Any:
    """What `layer` computes on `inputs`, as a built-in `Dense` with a sigmoid holding the
    fixed weights (`weights`), for `export`."""
    kernel, bias = weights(int(inputs.shape[-1]))
    dense = keras.layers.Dense(len(bias), activation="sigmoid", name=layer.name)
    out = dense(inputs)
    dense.set_weights([kernel, bias])
    return out


def weights(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The steps as a `Dense`'s kernel (n, n x thresholds) and bias: column i x k + j is
    input i's step at threshold j.

    >>> kernel, bias = weights(2)
    >>> kernel.shape, bias.shape, float(kernel[1, 7]), float(bias[7])
    ((2, 14), (14,), 8.0, 12.0)
    """
    k = len(THRESHOLDS)
    kernel = np.zeros((n, n * k), np.float32)
    for i in range(n):
        kernel[i, i * k : (i + 1) * k] = SHARPNESS
    bias = np.tile(-SHARPNESS * np.asarray(THRESHOLDS, np.float32), n)
    return kernel, bias


def relevance(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each input's share of the targets' squared error that its own steps explain (a
    piecewise-constant fit between `THRESHOLDS`), over the most relevant input's: (n,),
    in [`LEAST_RELEVANCE`, 1]. `z`: standardised inputs (m, n); `y`: targets, (m,) or
    (m, outputs). The steps head's penalty on an input's steps is over its square root: where
    one input in nine carries the concept (an age band), the other eight's 56 steps would
    fit noise; over the relevance itself, a noise-free linear target's steps head moved
    enough between solves to set off a false drift (docs/learning-log.md).

    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(200, 3))
    >>> relevance(z, (np.abs(z[:, 1]) < 0.6).astype(float)).round(2).tolist()
    [0.06, 1.0, 0.04]
    """
    y = np.asarray(y, np.float64).reshape(len(z), -1)
    explained = np.zeros(z.shape[1])
    for i in range(z.shape[1]):
        bins = np.digitize(z[:, i], THRESHOLDS)
        counts = np.bincount(bins, minlength=len(THRESHOLDS) + 1)
        held = counts > 0
        for column in y.T:  # (a target of several outputs: their sum)
            sums = np.bincount(bins, weights=column, minlength=len(THRESHOLDS) + 1)
            explained[i] += np.sum(sums[held] ** 2 / counts[held]) - column.sum() ** 2 / len(y)
    top = explained.max()
    if not top > 0:
        return np.ones(z.shape[1])
    return np.clip(explained / top, LEAST_RELEVANCE, 1.0)
