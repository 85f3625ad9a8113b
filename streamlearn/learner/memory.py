"""The memory head, written: the replay buffer's newest samples into a hedge model's
nearest-neighbour head (`streamlearn.nn.memory`).

In the learner's spare time, after the replay and the linear head's solve, the newest
`memory` samples of the replay buffer become the head's slots: their standardised inputs
(the model's first layers, as the head reads them) the keys; their targets the values: a
class's probabilities, smoothed by `SMOOTHING` so that no miss costs an unbounded log
loss, or the standardised target of a regression. After a drift the buffer holds only
the samples since, and so, at the next write, does the memory.

The kernel's bandwidth `tau` is chosen over the memory itself: the candidates are
`BANDWIDTHS` times the median squared distance from a slot to its `NEIGHBOURS`-th nearest
neighbour, and the one with the least leave-one-out loss wins (each slot predicted by the
others). It is chosen again once a quarter of the samples it holds are new: after a drift,
when the buffer starts again from a few samples, at every write while the memory fills.

Cost: the first layers' forward pass over `memory` samples and, when the bandwidth is
chosen, a (memory x memory) distance matrix: ~5 ms for 500 samples of 10 inputs. It runs
only in spare time, never while a backlog waits.
"""

from __future__ import annotations

import keras
import numpy as np

from streamlearn.learner.replay import FromReplay, Replay
from streamlearn.nn import memory, standardize

NEIGHBOURS = 5  # the scale of the bandwidth: distance to the 5th nearest (River's k)
BANDWIDTHS = (0.125, 0.25, 0.5, 1.0, 2.0)  # candidates, x the median 5th-nearest distance^2
SMOOTHING = 0.02  # of a class's probability, spread over all classes
EMPTY = -1e9  # an unwritten slot's bias: its softmax weight is 0


class MemoryWriter(FromReplay):
    """One model's memory head, and when it is next written."""

    def __init__(self, model: keras.Model, task: str) -> None:
        self.layer: memory.Memory = memory.find(model)
        self.features = keras.Model(model.inputs[0], self.layer.input[0], name="memory_features")
        self.task = task
        self.target = standardize.find(model, standardize.Unstandardize)
        self.tau: float | None = None
        self._tuned_at = -1
        self.writes = 0

    @classmethod
    def of(cls, model: keras.Model, task: str) -> MemoryWriter | None:
        """The model's memory head's writer; None for a model without one."""
        return None if memory.find(model) is None else cls(model, task)

    def update(self, replay: Replay) -> bool:
        """The newest samples of `replay` into the head; False when there was nothing to do."""
        if not self.due(replay):
            return False
        self.setting(replay)
        x, y = replay.newest(self.layer.size)
        keys = np.asarray(self.features(x, training=False), np.float64).reshape(len(x), -1)
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


def bandwidth(keys: np.ndarray, values: np.ndarray, loss) -> float:  # type: ignore[no-untyped-def]
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
