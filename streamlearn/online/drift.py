"""Concept drift: a detector on the online (test-then-train) loss, ADWIN-style. The
trainer gives it the served prediction's squared error (`hedge.served_error`), a model
of one head its training loss.

It keeps the recent steps' losses (each a mean over a batch of fresh samples, weighted by
its size) in a bounded window, and every `clock` samples (16: an abrupt change shows a
step or two after it begins) asks whether the newer part of the window has a higher mean
loss than the older part by more than chance allows: for a split into an older part of
n0 samples and a newer one of n1, drift when

    mean1 - mean0 > z * sigma * sqrt(1/n0 + 1/n1)        (twice that when n1 is one step)
    mean1 - mean0 > min_rise * mean0  and  > FLOOR * the stream's starting loss

with sigma the per-sample spread of the loss, judged from the differences of neighbouring
steps' means over the last SPREAD_STEPS steps (a trimmed mean: the steps at a change or
at the start of the stream do not count). A significant fall (the model learning) drops
the older part without a drift, so that the start of a stream, whose loss was high, is no
reference; but the newest `min_samples` samples stay, so that a change right after the
fall has a reference to rise from; on drift the older part is dropped too, so the test
starts over on the new concept, and the learner starts afresh
(`streamlearn.online.trainer.Trainer.changed`). What was measured: docs/learning-log.md.

Bounded: at most `max_steps` steps in the window and SPREAD_STEPS differences (16 and 8
bytes each, allocated once).
"""

from __future__ import annotations

import numpy as np

SPREAD_STEPS = 256  # neighbouring steps the loss's spread is judged by
TRIM = 2  # of the spread's evidence: the largest left out
# Differences of neighbouring steps before the first test: the spread is judged by at least
# 4 once the TRIM largest are left out. More delays the first drift a stream can show
# (docs/learning-log.md, "Drift").
MIN_SPREAD = 6
LONE = 2.0  # the bound's factor for a newer part of a single step
FLOOR = 0.1  # of the loss at the start of the stream: a smaller rise is never drift


class DriftDetector:
    """Watches the online loss for a lasting rise; `add` says when it sees one."""

    def __init__(
        self,
        z: float = 5.0,
        min_rise: float = 0.3,
        min_samples: int = 100,
        min_newer: int = 16,
        max_steps: int = 2000,
        clock: int = 16,
    ) -> None:
        self.z = z
        self.clock = clock  # samples between tests (as ADWIN's clock): the test is ~0.1 ms
        self._untested = 0
        self.min_rise = min_rise
        self.min_samples = min_samples  # in the older part
        self.min_newer = min_newer  # in the newer part: a change shows this soon at best
        # the window's steps, oldest first: sizes and mean losses (arrays: the test runs at
        # every step, on the learner's critical path)
        self._steps = np.zeros((2, max_steps), np.float64)
        self._len = 0
        self.detected = 0  # drifts, ever
        self.last_at: int | None = None  # samples seen when the last one was detected
        # the loss over the stream's first min_samples samples, an untrained model's: a rise
        # must pass FLOOR of it (a loss near zero, a noise-free concept learned, jitters by
        # more than min_rise of itself)
        self._start = [0.0, 0.0]  # samples, loss sum
        # the spread's evidence: for the last SPREAD_STEPS pairs of neighbouring steps,
        # d^2 / (1/n_i + 1/n_j) with d the difference of their mean losses (kept across the
        # window's cuts, which can leave it too few steps to judge the spread by)
        self._d2 = np.zeros(SPREAD_STEPS, np.float64)
        self._d2_len = 0
        self._last: tuple[int, float] | None = None

    def add(self, n: int, loss: float, seen: int) -> bool:
        """A step over `n` fresh samples had mean loss `loss`; `seen` samples so far.
        True when this step shows a drift."""
        steps = self._steps
        if self._len == steps.shape[1]:  # full: the oldest step leaves
            steps[:, :-1] = steps[:, 1:]
            self._len -= 1
        steps[:, self._len] = n, loss
        if self._last is not None:
            self._d2[self._d2_len % SPREAD_STEPS] = (loss - self._last[1]) ** 2 / (
                1 / n + 1 / self._last[0]
            )
            self._d2_len += 1
        self._last = n, loss
        if self._start[0] < self.min_samples:
            self._start[0] += n
            self._start[1] += n * loss
        self._len += 1
        self._untested += n
        if self._len < 4 or self._d2_len < MIN_SPREAD or self._untested < self.clock:
            return False
        self._untested = 0
        found = self._split()
        if found is None:
            return False
        split, rose = found
        if not rose:  # the newest `min_samples` stay, a reference for a rise right after
            held = np.cumsum(steps[0, : self._len][::-1])  # samples in the newest k steps
            split = min(split, self._len - 1 - int(np.searchsorted(held, self.min_samples)))
            split = max(split, 0)
        newer = steps[:, split : self._len].copy()  # the new concept's steps stay
        self._len = newer.shape[1]
        steps[:, : self._len] = newer
        if not rose:  # learning: the higher loss from before is no reference any more
            return False
        self.detected += 1
        self.last_at = seen
        return True

    def _split(self) -> tuple[int, bool] | None:
        """The step where the newer part begins, for the strongest significant rise (True)
        or, when none, the strongest significant fall (False)."""
        ns, losses = self._steps[:, : self._len]
        n0 = np.cumsum(ns)[:-1]  # samples before each split 1..k-1
        s0 = np.cumsum(ns * losses)[:-1]
        total, s = ns.sum(), float((ns * losses).sum())
        n1 = total - n0
        m0, m1 = s0 / n0, (s - s0) / n1
        # the per-sample variance of the loss, from the batch means: Var(mean of n samples)
        # = sigma^2 / n, so two neighbouring steps' means differ by d with
        # E[d^2 / (1/n_i + 1/n_j)] = sigma^2; the largest TRIM are left out, so that the
        # steps at a change or at the start do not count (a loss is heavy-tailed: a median
        # would take the spread of a model right on most samples for the whole spread)
        d2 = np.sort(self._d2[: min(self._d2_len, SPREAD_STEPS)])
        sigma2 = float(d2[: max(len(d2) - TRIM, 1)].mean())
        ok = (n0 >= self.min_samples) & (n1 >= self.min_newer) & (sigma2 > 0)
        rise = m1 - m0
        bound = self.z * np.sqrt(np.maximum(sigma2, 1e-12) * (1 / n0 + 1 / n1))
        bound[-1] *= LONE  # a newer part of one step: one outlying step is not a change
        for sign, rose in ((1.0, True), (-1.0, False)):
            least = np.maximum(self.min_rise * m0, FLOOR * self._start[1] / self._start[0])
            hit = ok & (sign * rise > bound) & (sign * rise > least)
            if hit.any():
                return int(np.argmax(np.where(hit, sign * rise / bound, -np.inf))) + 1, rose
        return None

    def figures(self) -> dict[str, int | None]:
        return {"drifts_detected": self.detected, "last_drift_at_sample": self.last_at}


# A drift step's older rows are the old concept when their loss is under 1/RISE of the newer
# rows' (`newer_part`).
RISE = 4.0


def newer_part(losses: np.ndarray) -> int:
    """How many of the newest rows of the step that showed a drift to keep: the rows from
    the change within the step on, where the old concept's rows came first.

    `losses` holds each row's loss under the model of the old concept (which has taken
    the step once), oldest row first. The change is the split that most raises the mean
    loss, weighed by how many rows each side has (a two-sample statistic); the older rows
    go when their mean loss is under 1/RISE of the newer rows'. Otherwise (the whole step
    is the new concept, or no split stands out) every row stays.

    Why: the learner starts afresh on the step that showed a drift, and a change seldom
    falls on a step's first row. Early in a gradual change, or with a step that began
    before an abrupt one, most of the step is the old concept: kept, the new model first
    learned the concept it had just left (docs/learning-log.md, "Drift").

    >>> newer_part(np.array([0.01] * 30 + [3.0] * 10))  # the change 30 rows in
    10
    >>> newer_part(np.array([2.0, 4.0, 3.0, 5.0] * 10))  # all of it new: noise, no split
    40
    """
    n = len(losses)
    if n < 2:
        return n
    before = np.cumsum(losses)[:-1]  # the loss sum of rows [0, s), s = 1 .. n-1
    s = np.arange(1, n)
    older, newer = before / s, (losses.sum() - before) / (n - s)
    split = int(np.argmax((newer - older) * np.sqrt(s * (n - s) / n)))
    if older[split] * RISE >= newer[split]:
        return n
    return n - int(s[split])


def row_losses(task: str, predicted: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each row's loss, as the model's training loss for `task` counts it: log loss, or the
    squared error (regression)."""
    y = np.asarray(y, np.float64).reshape(len(predicted), -1)
    p = np.asarray(predicted, np.float64).reshape(len(predicted), -1)
    if task == "binary":
        q = np.clip(p[:, 0], 1e-7, 1 - 1e-7)
        return -(y[:, 0] * np.log(q) + (1 - y[:, 0]) * np.log(1 - q))
    if task == "multiclass":
        return -np.log(np.clip(p[np.arange(len(p)), y[:, 0].astype(np.int64)], 1e-7, 1.0))
    return np.mean((p - y) ** 2, axis=1)
