"""Served predictions kept for the labels that come later (`streamlearn.store.pending`).

Before a batch's replies are sent, each request with an `id` keeps its features, the
version, its prediction and the serve time, all of the batch's in one Redis call (a
round trip, ~0.1-0.3 ms, added to the replies of a batch holding an id; none otherwise):
a client that sends its label the moment the reply arrives finds the prediction kept. A
failure there costs the labels of that batch (counted, logged), never a reply.

Only single-sample requests without a key: a batched request's one id names no single
prediction, and a keyed request's window is the device's, kept by ingest already. An HTTP
request (the protocol's tensors always have a batch dimension) is single when it has one
row, and is kept only in its client's owner namespace (`names.http_owner`), never the
anonymous one of bare `predict`.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import redis

from streamlearn.actor.inbox import Pending
from streamlearn.contract.names import owned
from streamlearn.store.pending import PendingStore, encode

log = logging.getLogger(__name__)

_LOG_EVERY_S = 10.0


class Keeper:
    """Keeps an actor's served predictions in a `PendingStore`, one call per batch."""

    def __init__(self, store: PendingStore) -> None:
        self.store = store
        self.kept = 0
        self.evicted = 0  # dropped before their TTL to keep `max_pending`, `max_pending_bytes`
        self.evicted_own = 0  # a client's own, dropped to keep its `sender_share`
        self.failures = 0  # batches whose predictions could not be kept
        self._logged_at = -float("inf")

    def keep(self, batch: list[Pending], y: np.ndarray, version: int) -> None:
        """Keep the predictions `y` (one row per row of the batch) of `batch`'s requests
        that carry an id."""
        now = time.time()
        ids: list[str] = []
        values: list[bytes] = []
        row = 0
        for p in batch:
            if p.id is not None and p.key is None and _single(p):
                ids.append(owned(p.client, p.id))
                values.append(encode(p.x[0].ravel(), np.atleast_1d(y[row]), version, now))
            row += len(p.x)
        if not ids:
            return
        try:
            pool, own = self.store.keep(ids, values, now)
        except redis.RedisError as exc:
            self.failures += 1
            if now - self._logged_at >= _LOG_EVERY_S:
                self._logged_at = now
                log.warning(
                    "predictions not kept for their labels (%s); %d batches so far",
                    exc,
                    self.failures,
                )
            return
        self.kept += len(ids)
        self.evicted += pool
        self.evicted_own += own


def _single(p: Pending) -> bool:
    """Whether a request's id names one prediction: an MQTT request of one sample (not a
    batch, even of one); a door's (HTTP) of one row, with an owner namespace of its own."""
    if p.answer is None:
        return not p.batched
    return p.client is not None and len(p.x) == 1
