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

import keras
import numpy as np

from streamlearn.learner.batching import Batch
from streamlearn.nn import networks

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
        self.good = networks.snapshot(variables)  # the rollback point
        self._since_good: list[Batch] = []
        self.marks = self.backs = 0  # rollback points made, returns to one (`lockstep`)

    def finite(self, logs: dict[str, float]) -> bool:
        """Whether a step left a finite loss, weights and optimizer state."""
        if not math.isfinite(logs["loss"]):
            return False
        flag = logs.get(networks.FINITE)
        return flag >= 1.0 if flag is not None else networks.all_finite(self._snapshot())

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
        if not networks.all_finite(values):
            self.back("non-finite variables")
            return False
        self.good, self._since_good = values, []
        self.marks += 1
        return True

    def back(self, reason: str) -> None:
        """Past the per-step checks (a bug if it happens): no culprit to name, no replay."""
        networks.restore(self._variables, self.good)
        self._since_good = []
        self.backs += 1
        self._rolled_back(reason)

    def undo(self) -> None:
        """Back to the variables before the last step: the rollback point plus a replay."""
        networks.restore(self._variables, self.good)
        for i, good in enumerate(self._since_good):
            # replays are deterministic (a stacked batch's at its own learning rates)
            if not self.finite(self._fit(good.x, good.y, good.w, good.rates)):
                log.error("replay diverged at %d of %d", i, len(self._since_good))
                self.mark()
                break

    def _snapshot(self) -> list[np.ndarray]:
        return networks.snapshot(self._variables)
