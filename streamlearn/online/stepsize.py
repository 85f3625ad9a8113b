"""The learner's step size: smaller as the recent loss falls, annealed while idle.

Two rules set the optimizer's learning rate, `learning_rate x by_loss x idle`:

- By the recent loss: `by_loss = sqrt(recent / start)`, between `FLOOR` and 1, with
  `recent` the loss's moving mean over about the last `horizon` fresh samples and `start`
  its mean over the stream's first `horizon`. An optimizer at a constant step size keeps
  jittering around a fit by about its step (Adam's: `learning_rate` of each weight's
  spread): on a linear target that jitter, not the concept, set the error. As the loss
  falls the steps shrink; when it rises (a change) they grow back by themselves, and at a
  drift (`changed`) the recent loss starts over.
- While idle: with no fresh samples, replay runs epochs over the same buffer, and at a
  constant step size the fit jitters instead of settling. So, as multi-epoch training
  anneals, a replayed step takes `1 / (1 + e - GRACE)` of the rate once `e` epochs over
  the buffer since the last fresh batch pass `GRACE`; the next fresh batch trains at the
  full rate again. Replay between the messages of a live stream, a fraction of an epoch
  (or one or two over a small buffer), keeps the full rate.

The rate is the optimizer's own variable (no retrace); it is written only when it moves
by 10% or more, as a write costs the step time. A schedule (a factory's optimizer) is
left alone. What was measured: docs/learning-log.md.
"""

from __future__ import annotations

import math
from typing import Any


class StepSize:
    """The optimizer's learning rate under the two rules."""

    GRACE = 2.0  # epochs at the full rate: the quality bench's small datasets need them
    FLOOR = 0.1  # the smallest share of `learning_rate` a low loss brings it to

    def __init__(self, optimizer: object, horizon: int = 200) -> None:
        rate: Any = getattr(optimizer, "learning_rate", None)  # a Keras variable (untyped)
        self.rate = rate if hasattr(rate, "assign") else None
        self.full = float(rate.numpy()) if self.rate is not None else 0.0
        self.horizon = horizon
        self.by_loss = 1.0
        self.idle = 1.0
        self._start = [0.0, 0.0]  # the first `horizon` samples: count, loss sum
        self._recent: float | None = None
        # None: unknown (a checkpoint may bring another rate at start; an undo restores one)
        self.written: float | None = None
        self.samples = 0  # replayed since the last fresh batch

    def fresh(self, n: int, loss: float) -> None:
        """A fresh step of `n` samples scored `loss`; the next steps take the full rate."""
        if not math.isfinite(loss):
            return
        if self._start[0] < self.horizon:
            self._start[0] += n
            self._start[1] += n * loss
        rate = 1 - (1 - 1 / self.horizon) ** n
        self._recent = loss if self._recent is None else self._recent + rate * (loss - self._recent)
        start = self._start[1] / self._start[0]
        if start > 0:
            self.by_loss = min(1.0, max(self.FLOOR, math.sqrt(max(self._recent, 0.0) / start)))
        self.samples = 0
        self.idle = 1.0
        self._apply()

    def replayed(self, n: int, buffered: int, steps: int = 1) -> list[float]:
        """`steps` replayed steps of `n` samples each, in turn: the rate each one trains at.
        One step's is written to the optimizer here; several steps in one call
        (`multistep`) write each their own, in the call, as these writes would have."""
        rates = []
        for _ in range(steps):
            self.samples += n
            epochs = self.samples / max(buffered, 1)
            self.idle = 1.0 / (1.0 + max(0.0, epochs - self.GRACE))
            rates.append(self._apply(write=steps == 1))
        return rates

    def changed(self) -> None:
        """A drift: the recent loss starts over, and the rate is full again."""
        self._recent = None
        self.by_loss = 1.0
        self._apply()

    def forget(self) -> None:
        self.written = None

    def _apply(self, write: bool = True) -> float:
        """The rate the optimizer holds now, written if it moved by 10% (unless not to
        `write`: the caller does)."""
        target = self.full * self.by_loss * self.idle
        if self.written is not None and abs(target - self.written) < 0.1 * self.written:
            return self.written
        if self.rate is not None and write:
            self.rate.assign(target)
        self.written = target
        return target
