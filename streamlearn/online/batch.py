"""A training step's batch, padded to a bucket size.

Padding rows get sample weight 0 and real rows bucket/n, so the weighted mean a Keras
loss takes is the exact mean over the real samples, and a compiled step only ever sees a
few shapes (`buckets`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from streamlearn.online import buckets


@dataclass
class Batch:
    """One padded step: the first `n` rows are real; `done` are the entries it completes.
    Replayed steps stacked, several to a call (`multistep`): x is (steps, rows, ...), and
    `rates` the learning rate of each step."""

    x: np.ndarray
    y: np.ndarray
    w: np.ndarray
    n: int
    done: list[bytes] = field(default_factory=list)
    entries: list[bytes] = field(default_factory=list)  # every entry with a row here
    rates: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return self.n


def padded(
    xs: Iterable[np.ndarray], ys: Iterable[np.ndarray], sizes: tuple[int, ...], y_tail: tuple
) -> Batch:
    """Copy the parts into one batch of the smallest bucket of `sizes` that holds them."""
    xs, ys = list(xs), list(ys)
    x = xs[0] if len(xs) == 1 else np.concatenate(xs)
    n = len(x)
    size = buckets.fit(sizes, n)
    y = np.zeros((size, *y_tail), np.float32)
    y.reshape(size)[:n] = ys[0] if len(ys) == 1 else np.concatenate(ys)
    w = np.zeros(size, np.float32)
    w[:n] = size / n
    return Batch(buckets.pad(x.astype(np.float32, copy=False), size), y, w, n)
