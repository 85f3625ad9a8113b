"""Padded batch sizes: the few shapes a compiled step or forward pass ever sees.

The learner's step and the actor's forward pass are traced once per bucket size at start;
every batch is then padded to the smallest bucket that holds it, so nothing retraces
while running (a new shape costs a trace: steps ten times slower).
"""

from __future__ import annotations

import bisect

import numpy as np


def ladder(
    max_batch: int, smallest: int = 1, replicas: int = 1, given: tuple[int, ...] | None = None
) -> tuple[int, ...]:
    """Powers of 4 from `smallest` below `max_batch`, then `max_batch`; or the `given`
    sizes below `max_batch` and the smallest of them that holds it. Each is rounded up to
    a multiple of `replicas` (a data-parallel step splits a batch evenly).

    >>> ladder(64), ladder(100), ladder(1), ladder(256, smallest=16)
    ((1, 4, 16, 64), (1, 4, 16, 64, 100), (1,), (16, 64, 256))
    >>> ladder(64, given=(64, 8, 8, 32)), ladder(10, given=(8, 128, 256)), ladder(6, replicas=4)
    ((8, 32, 64), (8, 128), (4, 8))
    """
    if given is None:
        sizes, size = [], smallest
        while size < max_batch:
            sizes.append(size)
            size *= 4
        used = [*sizes, max_batch]
    else:
        used = [b for b in given if b < max_batch] + [min(b for b in given if b >= max_batch)]
    return tuple(sorted({-(-b // replicas) * replicas for b in used}))


def fit(buckets: tuple[int, ...], n: int) -> int:
    """The smallest bucket that holds `n` rows; `n` itself when none does."""
    return max(buckets[min(bisect.bisect_left(buckets, n), len(buckets) - 1)], n)


def pad(rows: np.ndarray, size: int) -> np.ndarray:
    """`rows` followed by zero rows up to `size` (`rows` itself when it has `size`)."""
    if len(rows) == size:
        return rows
    out = np.zeros((size, *rows.shape[1:]), np.float32)
    out[: len(rows)] = rows
    return out
