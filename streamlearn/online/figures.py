"""What a learner reports of its learning: its counters and its recent test-then-train figures.

`LearnerState` holds the counters that a checkpoint saves and the status reports;
`RecentFigures` the means over the last samples, what promotion compares.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass
class LearnerState:
    """Counters that a checkpoint saves and the status reports."""

    step: int = 0
    version: int = 0
    samples_seen: int = 0
    online_loss: float | None = None
    online_metric: float | None = None
    rollbacks: int = 0
    dead_lettered: int = 0  # samples of undone steps

    @classmethod
    def from_json(cls, doc: dict) -> LearnerState:
        """Counters saved in a checkpoint; ValueError or TypeError when one is not a number."""
        counts = ("step", "version", "samples_seen", "rollbacks", "dead_lettered")
        means = ("online_loss", "online_metric")
        return cls(
            **{k: int(doc.get(k, 0)) for k in counts},
            **{k: None if doc.get(k) is None else float(doc[k]) for k in means},  # type: ignore[arg-type]
        )


class RecentFigures:
    """Means of the test-then-train loss and metric over the last `size` samples.

    Kept per batch, so the window holds between `size` and `size` + one batch samples.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.samples = 0
        self._batches: deque[tuple[int, float, float | None]] = deque()
        self._loss = self._metric = 0.0
        self._no_metric = 0  # batches in the window without a metric

    def add(self, n: int, loss: float, metric: float | None) -> None:
        """A batch of `n` samples scored `loss` and `metric` (means over the batch)."""
        self._batches.append((n, loss, metric))
        self._count(n, loss, metric, +1)
        while self.samples - self._batches[0][0] >= self.size:
            self._count(*self._batches.popleft(), -1)

    def _count(self, n: int, loss: float, metric: float | None, sign: int) -> None:
        self.samples += sign * n
        self._loss += sign * loss * n
        if metric is None:
            self._no_metric += sign
        else:
            self._metric += sign * metric * n

    def figures(self) -> dict[str, float | int | None]:
        n = self.samples
        return {
            "window_samples": n,
            "window_loss": self._loss / n if n else None,
            "window_metric": self._metric / n if n and not self._no_metric else None,
        }
