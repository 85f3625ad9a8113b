"""The memory head: a soft nearest-neighbour prediction from the most recent samples.

One more head for a hedge model (`hedge`), beside the linear head and the hidden layers'
heads: it reads the standardised inputs (head 0's tap) and predicts the targets of the
recent samples near them, weighted by a Gaussian kernel of the squared distance:

    w = softmax_j(-|q - k_j|^2 / tau),   prediction = sum_j w_j * v_j

over `size` slots of keys `k_j` (inputs) and values `v_j` (a class's probabilities, or the
standardised target). As |q|^2 is the same for every slot, the softmax's argument is
affine in q, `q @ kernel + bias` with kernel `2 k_j / tau` and bias `-|k_j|^2 / tau`; the
layer (`Memory`) holds it in that form, so the head is a `Dense` with a softmax and a
`Dense` without a bias (`as_builtin`, for `export`), and the actors serve it as the
learner scores it. A nearest-neighbour model is what River does best on the streams whose
concept is local, and where the concept changes it follows at once: the memory holds
only what came since.

Its weights are not trained but written (`MemoryWriter`), in the learner's spare time
after the replay and the linear head's solve: the newest `memory` samples of the replay
buffer become the slots, their standardised inputs (the model's first layers, as the head
reads them) the keys, their targets the values (a class's probabilities smoothed by
`SMOOTHING`, so that no miss costs an unbounded log loss, or the standardised target).
After a drift the buffer holds only the samples since, and so, at the next write, does
the memory. Until the first write every slot weighs alike and every value is the prior
(`prior`), so the head predicts it.

The bandwidth `tau` is chosen over the memory itself (`bandwidth`): the candidates are
`BANDWIDTHS` times the median squared distance from a slot to its `NEIGHBOURS`-th nearest
neighbour, and the one with the least leave-one-out loss wins. It is chosen again once a
quarter of the samples it holds are new.

A training step computes the head only on the few rows of a live stream's batch (a
padded batch of at most `SCORED_ROWS` rows): there the step's logs (the served metric,
each head's loss for Hedge) hold the head as it serves. On a backlog's larger batches,
where its softmax over every slot for every row would be costly, it stands in as the
other heads' plain mean, with no gradient (the learner counts its loss as the worst
head's). Which of the two is fixed per batch size: on TensorFlow, whose trace covers every
size, by a condition that XLA (the learner's step is compiled with it:
`streamlearn.nn.networks`) resolves when it compiles each bucket size, so no step pays
for the test.

What it costs: docs/learning-log.md.
"""

from __future__ import annotations

from typing import Any, cast

import keras
import numpy as np

from streamlearn.online import standardize
from streamlearn.online.forward import Features
from streamlearn.online.replay import FromReplay, Replay

SCORED_ROWS = 64  # padded rows of a step that computes the head (a live stream's batch)


def computed_in_step(rows: Any) -> Any:
    """Whether a training step of `rows` padded rows (an int, or a traced scalar) computes
    the head, rather than its stand-in."""
    return rows <= SCORED_ROWS


@keras.saving.register_keras_serializable(package="streamlearn")
class Memory(keras.layers.Layer):
    """[(batch, inputs), the other heads (batch, heads, outputs)] -> (batch, 1, outputs):
    one head, stacked as the others are."""

    def __init__(self, size: int, outputs: int, prior: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size = size
        self.outputs = outputs
        self.prior = prior

    def build(self, input_shape: Any) -> None:
        dim = int(input_shape[0][-1])
        const = keras.initializers.Constant
        self.kernel = self.add_weight((dim, self.size), "zeros", trainable=False, name="kernel")
        self.bias = self.add_weight((self.size,), "zeros", trainable=False, name="bias")
        self.values = self.add_weight(
            (self.size, self.outputs), const(self.prior), trainable=False, name="values"
        )

    def call(self, inputs, training=None):
        q, heads = inputs
        if not training:
            return self._read(q)
        standin = keras.ops.mean(keras.ops.stop_gradient(heads), axis=1, keepdims=True)
        rows = q.shape[0]
        if rows is not None:  # a trace of one batch size (JAX, PyTorch)
            return self._read(q) if computed_in_step(rows) else standin
        scored = computed_in_step(keras.ops.shape(q)[0])
        return keras.ops.cond(scored, lambda: self._read(q), lambda: standin)

    def _read(self, q):
        w = keras.ops.softmax(keras.ops.matmul(q, self.kernel) + self.bias, axis=-1)
        return keras.ops.expand_dims(keras.ops.matmul(w, self.values), 1)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return (input_shape[0][0], 1, self.outputs)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "size": self.size,
            "outputs": self.outputs,
            "prior": self.prior,
        }


def as_builtin(layer: Memory, inputs: list[Any]) -> Any:
    """What `layer` computes on `inputs` (inference), as built-in Keras layers holding its
    weights: the other heads are not read."""
    name, inputs = layer.name, inputs[0]
    weigh = keras.layers.Dense(layer.size, activation="softmax", name=f"{name}_weights")
    read = keras.layers.Dense(layer.outputs, use_bias=False, name=f"{name}_read")
    z = read(weigh(inputs))
    weigh.set_weights(
        [keras.ops.convert_to_numpy(layer.kernel), keras.ops.convert_to_numpy(layer.bias)]
    )
    read.set_weights([keras.ops.convert_to_numpy(layer.values)])
    return keras.layers.Reshape((1, layer.outputs), name=f"{name}_row")(z)


def find(model: keras.Model) -> Memory | None:
    return next((layer for layer in model.layers if isinstance(layer, Memory)), None)


NEIGHBOURS = 5  # the scale of the bandwidth: distance to the 5th nearest (River's k)
BANDWIDTHS = (0.125, 0.25, 0.5, 1.0, 2.0)  # candidates, x the median 5th-nearest distance^2
SMOOTHING = 0.02  # of a class's probability, spread over all classes
EMPTY = -1e9  # an unwritten slot's bias: its softmax weight is 0


class MemoryWriter(FromReplay):
    """One model's memory head, and when it is next written."""

    def __init__(self, model: keras.Model, task: str) -> None:
        self.layer = cast(Memory, find(model))  # `of` made sure it has one
        self.features = Features(
            keras.Model(model.inputs[0], self.layer.input[0], name="memory_features")
        )
        self.task = task
        self.target = standardize.find(model, standardize.Unstandardize)
        self.tau: float | None = None
        self._tuned_at = -1
        self.writes = 0

    @classmethod
    def of(cls, model: keras.Model, task: str) -> MemoryWriter | None:
        """The model's memory head's writer; None for a model without one."""
        return None if find(model) is None else cls(model, task)

    def update(self, replay: Replay) -> bool:
        """The newest samples of `replay` into the head; False when there was nothing to do."""
        if not self.due(replay):
            return False
        self.setting(replay)
        x, y = replay.newest(self.layer.size)
        keys = np.asarray(self.features(x), np.float64).reshape(len(x), -1)
        values = self._values(y)
        if self.tau is None or replay.inserted - self._tuned_at >= max(1, len(keys) // 4):
            self.tau = bandwidth(keys, values, self._loss)
            self._tuned_at = replay.inserted
        n = len(keys)
        kernel = np.zeros((keys.shape[1], self.layer.size), np.float32)
        bias = np.full(self.layer.size, EMPTY, np.float32)
        table = np.full((self.layer.size, self.layer.outputs), self.layer.prior, np.float32)
        kernel[:, :n] = 2.0 * keys.T / self.tau
        bias[:n] = -np.sum(keys**2, axis=1) / self.tau
        table[:n] = values
        if not (np.all(np.isfinite(kernel)) and np.all(np.isfinite(bias))):
            return True
        self.layer.kernel.assign(kernel)
        self.layer.bias.assign(bias)
        self.layer.values.assign(table)
        self.writes += 1
        return True

    def _values(self, y: np.ndarray) -> np.ndarray:
        """What each slot predicts: a class's smoothed probabilities, or a target."""
        outputs = self.layer.outputs
        if self.task == "multiclass":
            onehot = np.eye(outputs)[y.astype(np.int64).reshape(-1)]
            return onehot * (1.0 - SMOOTHING) + SMOOTHING / outputs
        y = y.reshape(len(y), -1).astype(np.float64)
        if self.task == "binary":
            return y * (1.0 - SMOOTHING) + SMOOTHING / 2
        return y if self.target is None else self.target.standardized(y)

    def _loss(self, predicted: np.ndarray, values: np.ndarray) -> float:
        """The task's loss of predictions against the slots' own values."""
        if self.task == "regression":
            return float(np.mean((predicted - values) ** 2))
        if self.task == "binary":  # values are smoothed 0/1: the nearer end is the label
            label = values > 0.5
            p = np.where(label, predicted, 1.0 - predicted)
        else:
            p = predicted[np.arange(len(values)), np.argmax(values, axis=1)]
        return float(-np.mean(np.log(np.maximum(p, 1e-12))))

    def figures(self) -> dict[str, object]:
        return {"memory_writes": self.writes, "memory_bandwidth": self.tau}


def bandwidth(keys: np.ndarray, values: np.ndarray, loss) -> float:
    """The candidate bandwidth whose leave-one-out predictions over the slots lose least."""
    sq = np.sum(keys**2, axis=1)
    dist = np.maximum(sq[:, None] + sq[None, :] - 2.0 * keys @ keys.T, 0.0)
    np.fill_diagonal(dist, np.inf)
    n = len(keys)
    if n < 2:
        return 1.0
    k = min(NEIGHBOURS, n - 1)
    scale = float(np.median(np.partition(dist, k - 1, axis=1)[:, k - 1]))
    scale = scale if np.isfinite(scale) and scale > 0 else 1.0
    best, best_loss = scale, np.inf
    for c in BANDWIDTHS:
        tau = c * scale
        logits = -dist / tau
        w = np.exp(logits - logits.max(axis=1, keepdims=True))
        predicted = (w / w.sum(axis=1, keepdims=True)) @ values
        lost = loss(predicted, values)
        if lost < best_loss:
            best, best_loss = tau, lost
    return best
