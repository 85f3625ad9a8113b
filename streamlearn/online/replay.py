"""Replay: more than one gradient step per sample, taken only from the learner's spare time.

In the spirit of Reverb's samples-per-insert rate limiter: every fresh sample the learner
trains on also goes into a bounded ring buffer of the most recent `replay_buffer` samples,
and while no fresh batch is waiting the learner trains on batches drawn from that
buffer, until it has replayed `replay_ratio` samples per fresh one. A slow stream so
gives each sample about `1 + replay_ratio` steps; a fast one keeps the learner busy with
fresh batches and replays nothing. Replayed steps never count in the online metric: a
sample is scored only on its first sight, before it is learned.

A sample's chance to be drawn halves with every `HALF_LIFE` x `replay_buffer` samples
that came after it: the newest are replayed most, which helps where the concept moves
(against uniform draws and other half-lives: docs/learning-log.md).

Memory: `replay_buffer` x (bytes per x row + bytes per y row), allocated once, reported.
"""

from __future__ import annotations

import bisect

import numpy as np

from streamlearn.online.batch import Batch

HALF_LIFE = 0.5  # of the buffer's capacity, in samples of age: a draw's weight halves


class Replay:
    """A ring buffer of recent samples and the budget of samples to replay from it."""

    def __init__(
        self,
        capacity: int,
        sample_shape: tuple[int, ...],
        y_tail: tuple[int, ...],
        ratio: float,
        batch: int,
        buckets: tuple[int, ...],
        seed: int = 0,
    ) -> None:
        self.ratio = ratio
        # a size the step is traced for, so a replayed batch never retraces
        self.batch = buckets[min(bisect.bisect_left(buckets, batch), len(buckets) - 1)]
        self.capacity = capacity if ratio > 0 else 0
        self.x = np.zeros((self.capacity, *sample_shape), np.float32)
        self.y = np.zeros((self.capacity, *y_tail), np.float32)
        self.size = 0  # samples held
        self._next = 0  # where the next sample goes
        self.inserted = 0  # fresh samples, ever
        self.replayed = 0  # samples trained on from the buffer, ever
        self._rng = np.random.default_rng(seed)

    @property
    def nbytes(self) -> int:
        return self.x.nbytes + self.y.nbytes

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        """Fresh samples, just trained on; the oldest make room."""
        if not self.capacity:
            return
        n = len(x)
        if n >= self.capacity:
            x, y, n = x[-self.capacity :], y[-self.capacity :], self.capacity
        at = (self._next + np.arange(n)) % self.capacity
        self.x[at] = x
        self.y[at] = y.reshape(self.y[at].shape)
        self._next = (self._next + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.inserted += n

    def due(self, batches: int = 1) -> bool:
        """Whether `batches` replayed batches are within the budget (and the buffer can
        fill one)."""
        return self.size >= min(self.batch, self.capacity) > 0 and (
            self.replayed + batches * self.batch <= self.ratio * self.inserted
        )

    def sample(self, batches: int = 1) -> Batch:
        """A batch drawn from the buffer (with replacement), a sample's weight halving
        with every `HALF_LIFE` of the capacity in age: a truncated exponential on ages;
        with `batches` of 2 or more, that many drawn in turn and stacked (x: (batches,
        batch, ...)), for as many steps in one call (`multistep`)."""
        if batches > 1:
            parts = [self.sample() for _ in range(batches)]
            x, y, w = (np.stack([getattr(p, a) for p in parts]) for a in "xyw")
            return Batch(x, y, w, batches * self.batch)
        scale = HALF_LIFE * self.capacity / np.log(2.0)
        u = self._rng.random(self.batch) * -np.expm1(-self.size / scale)
        age = np.minimum((-scale * np.log1p(-u)).astype(np.int64), self.size - 1)
        rows = (self._next - 1 - age) % self.capacity
        self.replayed += self.batch
        w = np.ones(self.batch, np.float32)
        return Batch(self.x[rows], self.y[rows], w, self.batch)

    def held(self) -> tuple[np.ndarray, np.ndarray]:
        """Every sample held (x and y), in no particular order: views, not copies."""
        return self.x[: self.size], self.y[: self.size]

    def newest(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The newest `n` samples held (x and y), oldest first: copies."""
        rows = (self._next - 1 - np.arange(min(n, self.size))[::-1]) % max(self.capacity, 1)
        return self.x[rows], self.y[rows]

    def keep_newest(self, n: int) -> None:
        """Forget all but the newest `n` samples (after a drift: the old concept)."""
        n = min(n, self.size)
        if n == self.size:
            return
        self.x[:n], self.y[:n] = self.newest(n)
        self.size, self._next = n, n % self.capacity if self.capacity else 0

    def figures(self) -> dict[str, int | float]:
        return {
            "replay_buffer_samples": self.size,
            "replay_buffer_bytes": self.nbytes,
            "replayed_samples": self.replayed,
            "replay_per_sample": self.replayed / self.inserted if self.inserted else 0.0,
        }


class FromReplay:
    """A head set from the buffer's samples in spare time (`linear`, `memory`), not
    trained: due again once fresh samples came since it was last set."""

    MIN_HELD = 1  # samples the buffer must hold to set it from
    _set_at = -1  # the buffer's `inserted` count when it was last set

    def due(self, replay: Replay) -> bool:
        """Whether fresh samples came since it was last set (and `replay` holds enough:
        none without replay, `replay_ratio` 0)."""
        return replay.inserted != self._set_at and replay.size >= self.MIN_HELD

    def forget(self) -> None:
        """The last setting may be undone (a rollback): set it again at the next chance."""
        self._set_at = -1

    def setting(self, replay: Replay) -> None:
        """It is being set from `replay` now."""
        self._set_at = replay.inserted
