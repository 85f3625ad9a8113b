"""The learner's guard against non-finite steps: a rollback point and a replay.

It keeps a snapshot of the training variables known to be finite (the rollback point) and
the good batches trained since. Undoing a bad step restores the snapshot and replays those
batches (`train_on_batch` is deterministic for the same inputs), so only the bad batch is
lost. The point moves forward every `max_replay` good steps, which bounds what is kept.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from streamlearn.online import tensors
from streamlearn.online.batch import Batch

log = logging.getLogger(__name__)

Fit = Callable[[np.ndarray, np.ndarray, np.ndarray, list[float]], dict[str, float]]
REPLAY_MAX = 200  # good steps between rollback points: bounds the batches kept and replayed
# (a call of several replayed steps, `multistep`, counts as one: 200 x 8 batches of 16 rows)


class StepGuard:
    """The rollback point of one learner's variables and the good batches since."""

    def __init__(
        self,
        variables: list[keras.Variable],
        fit: Fit,
        rolled_back: Callable[[str], None],
        max_replay: int = REPLAY_MAX,
    ) -> None:
        """`fit` trains one step and returns its logs; `rolled_back(reason)` is told of
        every return to the rollback point (the learner counts them)."""
        self._variables = variables
        self._fit = fit
        self._rolled_back = rolled_back
        self._max_replay = max_replay
        self.good = tensors.snapshot(variables)  # the rollback point
        self._since_good: list[Batch] = []
        self.marks = self.backs = 0  # rollback points made, returns to one (`lockstep`)

    def finite(self, logs: dict[str, float]) -> bool:
        """Whether a step left a finite loss, weights and optimizer state."""
        if not math.isfinite(logs["loss"]):
            return False
        flag = logs.get(FINITE)
        return flag >= 1.0 if flag is not None else all_finite(self._snapshot())

    def reset(self) -> None:
        """The current variables become the rollback point, unchecked (a fresh start)."""
        self.good, self._since_good = self._snapshot(), []

    def kept(self, batch: Batch) -> None:
        """`batch` trained a good step: keep it for a replay."""
        self._since_good.append(batch)
        if len(self._since_good) >= self._max_replay:
            self.mark()

    def mark(self) -> bool:
        """Make the current variables the rollback point; False (and undone) if not finite."""
        values = self._snapshot()
        if not all_finite(values):
            self.back("non-finite variables")
            return False
        self.good, self._since_good = values, []
        self.marks += 1
        return True

    def back(self, reason: str) -> None:
        """Past the per-step checks (a bug if it happens): no culprit to name, no replay."""
        tensors.restore(self._variables, self.good)
        self._since_good = []
        self.backs += 1
        self._rolled_back(reason)

    def undo(self) -> None:
        """Back to the variables before the last step: the rollback point plus a replay."""
        tensors.restore(self._variables, self.good)
        for i, good in enumerate(self._since_good):
            # replays are deterministic (a stacked batch's at its own learning rates)
            if not self.finite(self._fit(good.x, good.y, good.w, good.rates)):
                log.error("replay diverged at %d of %d", i, len(self._since_good))
                self.mark()
                break

    def _snapshot(self) -> list[np.ndarray]:
        return tensors.snapshot(self._variables)


FINITE = "finite"


class TrainProbe:
    """Counts traces of the model's train step and adds a `finite` flag to its logs; on
    TensorFlow the step also resets the metrics, so the logs stay those of its batch.

    Python code in a compiled step runs only while it is traced, so `traces` is a true
    count of (re)traces; under eager execution every step counts. The flag (1.0 when every
    weight and optimizer variable is finite after the update) is computed inside the step,
    so checking it costs no copy to the host (on JAX, from the step's new state; a
    backend whose step returns neither form gets no flag, and the learner checks on the host).
    """

    def __init__(self, model: keras.Model, replicas: int = 1) -> None:
        self.calls = 0
        self.replicas = replicas  # a mirrored step is traced once per replica
        inner = model.train_step
        # On TensorFlow the step itself zeroes the metrics first, in its graph, and the
        # eager `reset_metrics` of every `train_on_batch` (an assign per metric variable,
        # ~0.4 ms a step on 2 cores: a third of a 256-sample step) is skipped.
        in_step = keras.backend.backend() == "tensorflow"

        self.model, self.in_step, self.resets = model, in_step, 0

        def train_step(*args: Any) -> Any:
            self.calls += 1
            if in_step:
                self.resets = len(model.metrics_variables)
                for v in model.metrics_variables:
                    v.assign(keras.ops.zeros(v.shape, v.dtype))
            out = inner(*args)
            if isinstance(out, dict):  # TensorFlow, PyTorch: variables updated in place
                variables = [*model.trainable_variables, *model.optimizer.variables]
                return {**out, FINITE: all_finite_tensor(variables)}
            if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], dict):
                # JAX: (logs, state), state = (trainable, non-trainable, optimizer, metrics)
                logs, state = out
                return {**logs, FINITE: all_finite_tensor([*state[0], *state[2]])}, state
            return out

        model.train_step = train_step
        if in_step:
            model.reset_metrics = lambda: None  # done by the step (`train_on_batch` only)
        if getattr(model, "train_function", None) is not None:
            model.make_train_function(force=True)

    @property
    def traces(self) -> int:
        return self.calls // self.replicas

    def complete(self) -> None:
        """After the first step: the compiled metrics are built by it, inside its trace,
        after the step zeroed the variables it saw; a step traced then would go on adding
        to them (a batch's logs would be a mean since the first step). Traced again."""
        if self.in_step and len(self.model.metrics_variables) > self.resets:
            self.model.make_train_function(force=True)


def all_finite_tensor(values: list[Any]) -> Any:
    """1.0 when every float value is finite: one isfinite over all, fewer ops than one each."""
    flat = [
        keras.ops.reshape(keras.ops.cast(v, "float32"), (-1,))
        for v in values
        if keras.backend.is_float_dtype(v.dtype)
    ]
    return keras.ops.cast(keras.ops.all(keras.ops.isfinite(keras.ops.concatenate(flat))), "float32")


def all_finite(values: list[np.ndarray]) -> bool:
    return all(np.all(np.isfinite(v)) for v in values if np.issubdtype(v.dtype, np.floating))
