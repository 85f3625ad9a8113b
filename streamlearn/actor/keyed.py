"""Key-only requests (models with a window): the earlier steps are the key's stored ones.

A key-only request brings only the newest step; the earlier ones are its key's stored
observations (`streamlearn.store.windows`), read for all such requests of a batch in one
pipelined round trip before the forward pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import cast

import numpy as np
import redis

from streamlearn.actor.inbox import Pending
from streamlearn.store.windows import WindowStore

log = logging.getLogger(__name__)


def complete_windows(
    batch: list[Pending], windows: WindowStore, refuse: Callable[[Pending, str], None]
) -> list[Pending]:
    """Give key-only requests their windows: the key's newest `window - 1` stored
    observations (before the request's seq, when given), then the request's own step.

    One round trip for the whole batch. A request whose key has too few observations is
    answered by `refuse(request, reason)` (naming the key and how many are known), and
    leaves the batch.
    """
    keyed = [p for p in batch if p.key is not None]
    if not keyed:
        return batch
    need = windows.window - 1
    try:
        earlier = windows.recent(  # each of `keyed` has a key
            cast(list[tuple[str, float | None]], [(p.key, p.seq) for p in keyed]), need
        )
    except redis.RedisError as exc:
        log.warning("stored observations unavailable: %s", exc)
        for p in keyed:
            refuse(p, f"key {p.key!r}: stored observations unavailable ({exc})")
        return [p for p in batch if p.key is None]
    for p, steps in zip(keyed, earlier, strict=True):
        if len(steps) < need:
            before = "" if p.seq is None else f" before seq {_number(p.seq)}"
            refuse(
                p,
                f"key {p.key!r}: {len(steps)} of the {need} earlier observations "
                f"a window needs are known{before}",
            )
        else:
            p.x = np.concatenate([steps, p.x])[None]
    return [p for p in batch if not p.done]


def _number(value: float) -> int | float:
    """A seq as the client wrote it: 17, not 17.0."""
    return int(value) if value.is_integer() else value
