"""Which of a trainer's steps are traced yet, and which traces were warm-up.

A step is traced once per bucket size (and once for the replay's stacked steps) with zero
sample weights, its effects undone. At start every one is traced, or, for a live stream,
the smallest alone: the others wait in `cold` until spare time (`next`) or their first
batch (`Trainer.fit`), whichever comes first, so a new model's first trained version
waits for one trace, not for all (seconds each). Those traces count as warm-up; a trace
after them is a retrace (a batch in a shape not traced: 0 expected).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import keras
import numpy as np

from streamlearn.online import tensors
from streamlearn.online.guard import TrainProbe
from streamlearn.online.multistep import MultiStep
from streamlearn.online.replay import Replay

STACKED = "stacked"  # the replay's stacked steps, in `WarmUp.cold`


class Steps(Protocol):
    """What of a trainer its warm-up reads: `streamlearn.online.trainer.Trainer`."""

    model: keras.Model
    variables: list[Any]
    buckets: tuple[int, ...]
    replicas: int
    collective: Any
    probe: TrainProbe
    multistep: MultiStep | None
    replay: Replay
    sample_shape: tuple[int, ...]
    task: str

    def fit(self, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, Any]: ...


class WarmUp:
    """A trainer's traces: those still to make (`cold`), those made as warm-up."""

    def __init__(self, trainer: Steps) -> None:
        self.trainer = trainer
        self.cold: list[int | str] = []  # steps not traced yet (`trace(later=True)`)
        self.traces = 0  # made as warm-up
        self._retraces_meanwhile: int | None = None  # while one of `cold` is traced

    def trace(self, later: bool) -> dict[str, Any]:
        """Trace the step of every bucket (with `later`, the smallest alone), its effects
        undone; the logs of the last step traced."""
        t = self.trainer
        before = tensors.snapshot(t.variables)
        first, logs = t.buckets[0], {}
        for size in t.buckets[:1] if later else t.buckets:
            x, y = self.zeros(size)
            none = np.zeros(size, np.float32)
            if t.replicas > 1 and size == first and not t.collective:
                # Keras builds the compiled loss and metrics from a plain (undivided) batch.
                t.model.train_on_batch(x, y, sample_weight=none)
            elif size == first and not t.collective:
                # built before the first trace, so that one trace makes the step (built
                # inside it, `probe.complete` must trace it again: a second, at start)
                t.model._symbolic_build(data_batch=(x, y, none))
            logs = t.fit(x, y, none)
            if size == first and not t.collective:
                t.probe.complete()  # the metrics, built by that step, zeroed by the next
                logs = t.fit(x, y, none)
        stacked = t.multistep is not None and t.replay.capacity
        self.cold = [*t.buckets[1:], *([STACKED] if stacked else [])] if later else []
        if stacked and not later:
            self._trace_stacked()
        tensors.restore(t.variables, before)
        return logs

    def next(self) -> bool:
        """Trace one step `trace(later=True)` left, its effects undone (spare time); False
        when none is left."""
        if not self.cold:
            return False
        size = self.cold.pop(0)
        t = self.trainer
        before = tensors.snapshot(t.variables)
        with self.tracing():
            if isinstance(size, str):  # STACKED
                self._trace_stacked()
            else:
                t.fit(*self.zeros(size), np.zeros(size, np.float32))
        tensors.restore(t.variables, before)  # (the Hedge weights kept: no `read`)
        return True

    def first_of(self, step: int | str) -> bool:
        """Whether a step of this size (or STACKED) is still cold: if so it is warm now,
        and the caller traces it inside `tracing()`."""
        if step not in self.cold:
            return False
        self.cold.remove(step)
        return True

    @property
    def traced_size(self) -> int:
        """The largest batch a traced step takes (the larger ones wait in `cold`)."""
        return max(size for size in self.trainer.buckets if size not in self.cold)

    def zeros(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """A batch of `size` zero rows and targets: what a step is traced on."""
        t = self.trainer
        y = (size,) if t.task == "multiclass" else (size, 1)
        return np.zeros((size, *t.sample_shape), np.float32), np.zeros(y, np.float32)

    @contextlib.contextmanager
    def tracing(self) -> Iterator[None]:
        """A step traced as warm-up: its traces are not retraces, also while it runs (the
        metrics are read from another thread)."""
        self._retraces_meanwhile = self.retraces
        traces = self.trainer.probe.traces
        try:
            yield
        finally:
            self.traces += self.trainer.probe.traces - traces
            self._retraces_meanwhile = None

    def _trace_stacked(self) -> None:
        t = self.trainer
        assert t.multistep is not None
        t.multistep.trace(t.replay.batch, t.sample_shape, t.replay.y.shape[1:])

    @property
    def retraces(self) -> int:
        """Traces after warm-up: 0 unless a batch came in a shape not traced."""
        if self._retraces_meanwhile is not None:
            return self._retraces_meanwhile
        return self.trainer.probe.traces - self.traces
