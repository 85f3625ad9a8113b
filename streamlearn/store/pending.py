"""Predictions kept for the labels that come later, and the served score they make.

An actor keeps each prediction it served for a request with an `id` under
`pending:{ns}:{i|s}:{id}` (`Names.owned`: `ns` is `-` for the shared `predict` topic, else
the requesting client's id or HTTP owner, so one client's labels join only its own
predictions) for `labels.ttl_s`: the request's features, the version, the prediction and
the serve time, one binary value (`encode`). The sorted set `pending` (key -> expiry)
bounds them to `labels.max_pending`, and `pending_bytes` (the index's entries' bytes,
`entry_bytes`) to `labels.max_pending_bytes`: a keep trims the expired entries and,
beyond either bound, the soonest to expire. A client (`predict/{client}`, an HTTP owner)
keeps at most its `labels.sender_share` of both (its own index `pending:by:{n}:{client}`
and bytes): past it, its own soonest to expire go first, never another's. Ingest, or the
HTTP door, reads them back when a label arrives (`streamlearn.store.labels`), and once a
label has joined one into a sample it is overwritten by a one-byte tombstone that keeps
its TTL, so a label repeated after the de-duplication window still finds it joined and
adds nothing.

The first join of each prediction adds to the served score, the hash `served`: `labels`
(count), `loss_sum`, `metric_sum`, `unknown` (labels whose id was never kept or expired),
and the list `served:delays` holds the newest `MAX_DELAYS` label delays (label arrival
minus serve time, seconds) for their percentiles.

Memory: a kept prediction is a value of `HEADER.size` (18) + 4 × (inputs + outputs)
bytes, a key with a TTL, and an index entry holding the key again; `entry_bytes` counts
it, a little above what Redis spends (docs/learning-log.md). The delays list is at most
`MAX_DELAYS` short strings (~50 kB); the served hash four fields.
"""

from __future__ import annotations

import math
import struct
import time
from dataclasses import dataclass
from functools import cached_property
from typing import cast

import numpy as np
import redis
from redis.typing import EncodableT

from streamlearn.config.inputs import LabelsConfig
from streamlearn.contract.names import Names
from streamlearn.store import lua
from streamlearn.store.redis_client import evalsha

# magic, inputs (floats of x), outputs (floats of the prediction), version, served at (unix s)
HEADER = struct.Struct("<2sHHId")
MAGIC = b"P1"
JOINED = b"J"  # a prediction a label has joined: the tombstone
MAX_DELAYS = 1000  # label delays kept for the percentiles
CHUNK = 10_000  # keys per command or script call
ENTRY_BYTES = 256  # what a kept prediction costs Redis beside its value and key


def entry_bytes(key: bytes, value_bytes: int) -> int:
    """The bytes a kept prediction counts against `labels.max_pending_bytes` (as
    `pending_keep.lua` counts them): `ENTRY_BYTES`, its value, and 2.5 per byte of its key,
    held twice (the key, the index's member) and rounded up by the allocator.

    >>> entry_bytes(b"sl:{machines}:pending:-:s:r-1", 38)
    367
    """
    return ENTRY_BYTES + value_bytes + math.ceil(2.5 * len(key))


@dataclass(frozen=True)
class Kept:
    """A served prediction kept for its label: `x` and `y` flat float32 arrays."""

    x: np.ndarray
    y: np.ndarray
    version: int
    served_at: float


def encode(x: np.ndarray, y: np.ndarray, version: int, served_at: float) -> bytes:
    """One pending value: the header, then x and the prediction as float32.

    >>> kept = decode(encode(np.array([1, 2], np.float32), np.array([0.5]), 3, 10.0))
    >>> kept.x.tolist(), kept.y.tolist(), kept.version, kept.served_at
    ([1.0, 2.0], [0.5], 3, 10.0)
    """
    xb = np.ascontiguousarray(x, np.float32).tobytes()
    yb = np.ascontiguousarray(y, np.float32).tobytes()
    return HEADER.pack(MAGIC, len(xb) // 4, len(yb) // 4, version, served_at) + xb + yb


def decode(value: bytes | None) -> Kept | None:
    """The kept prediction, or None for a missing, joined or unreadable value."""
    if value is None or len(value) < HEADER.size:
        return None
    magic, nx, ny, version, served_at = HEADER.unpack_from(value)
    if magic != MAGIC or len(value) != HEADER.size + 4 * (nx + ny):
        return None
    floats = np.frombuffer(value, np.float32, nx + ny, HEADER.size)
    return Kept(floats[:nx], floats[nx:], version, served_at)


@dataclass(frozen=True)
class Joined:
    """A label joined to a kept prediction: what it adds to the served score."""

    id: str
    loss: float
    metric: float
    delay_s: float


class PendingStore:
    """The kept predictions of one model and its served score (the only module that
    knows their keys, values and scripts)."""

    def __init__(self, client: redis.Redis, names: Names, cfg: LabelsConfig) -> None:
        self.redis = client
        self.names = names
        self.cfg = cfg
        self.delays_key = names.served_delays_key

    @cached_property
    def _keep(self) -> redis.commands.core.Script:
        return lua.load(self.redis, "pending_keep")

    @cached_property
    def _join(self) -> redis.commands.core.Script:
        return lua.load(self.redis, "pending_join")

    @property
    def bytes_key(self) -> str:
        """String: the bytes of the index's entries (`entry_bytes`), kept by each keep."""
        return self.names.key("pending_bytes")

    def keep(
        self, ids: list[str], values: list[bytes], now: float | None = None
    ) -> tuple[int, int]:
        """Keep `values` (`encode`) under `ids` (`Names.owned`), in one call; returns how
        many older ones went to keep the pool's bounds, and to keep their senders' shares."""
        keys = [self.names.pending_key(i) for i in ids]
        now = time.time() if now is None else now
        cfg, fixed = self.cfg, ENTRY_BYTES + max(map(len, values), default=0)
        args: list[EncodableT] = [now, cfg.ttl_s, cfg.max_pending, cfg.max_pending_bytes, fixed]
        args += [*self.share(), self.names.pending_key("")]
        index = [self.names.pending_index_key, self.bytes_key]
        pool, own = self._keep(keys=[*index, *keys], args=[*args, *values])
        return int(pool), int(own)

    def share(self) -> tuple[int, int]:
        """What one sender may keep (`labels.sender_share`): entries of `max_pending`, and
        bytes of `max_pending_bytes`, counted as the pool counts them.

        >>> PendingStore(None, Names("m"), LabelsConfig()).share()  # the defaults
        (50000, 13421772)
        """
        cfg = self.cfg
        return max(1, int(cfg.sender_share * cfg.max_pending)), int(
            cfg.sender_share * cfg.max_pending_bytes
        )

    def size(self) -> tuple[int, int]:
        """(predictions kept, their bytes as counted against `labels.max_pending_bytes`)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(self.names.pending_index_key)
        pipe.get(self.bytes_key)
        count, counted = pipe.execute()
        return int(count), int(counted or 0)

    def fetch(self, ids: list[str]) -> list[bytes | None]:
        """The values kept under `ids` (None where none), in one round trip (an MGET of
        up to `CHUNK` keys each, so that no one command holds Redis long)."""
        if not ids:
            return []
        keys = [self.names.pending_key(i) for i in ids]
        if len(keys) <= CHUNK:
            return cast(list[bytes | None], self.redis.mget(keys))
        pipe = self.redis.pipeline(transaction=False)
        for start in range(0, len(keys), CHUNK):
            pipe.mget(keys[start : start + CHUNK])
        return [v for values in pipe.execute() for v in values]

    def join(self, joined: list[Joined], unknown: int) -> int:
        """Tombstone the joined predictions and score those not joined before, and count
        `unknown` labels, in one round trip (a call per `CHUNK`); returns how many were
        scored. A call again after a failure scores nothing twice."""
        if not joined and not unknown:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for start in range(0, max(1, len(joined)), CHUNK):
            chunk = joined[start : start + CHUNK]
            keys = [self.served_key, self.delays_key]
            keys += [self.names.pending_key(j.id) for j in chunk]
            args: list[object] = [JOINED, unknown if start == 0 else 0, MAX_DELAYS]
            for j in chunk:
                args += [repr(j.loss), repr(j.metric), f"{j.delay_s:.3f}"]
            evalsha(pipe, self._join.sha, keys, *args)
        try:
            return sum(int(n) for n in pipe.execute())
        except redis.exceptions.NoScriptError:  # a restarted Redis lost it: none ran
            self.redis.script_load(self._join.script)
            return self.join(joined, unknown)

    @property
    def served_key(self) -> str:
        return self.names.served_key

    def served(self, metric: str) -> dict[str, float | int | None] | None:
        """The served score for a status: labels, mean loss, mean `metric`, delay p50/p95,
        unknown ids; None before any label came."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.served_key)
        pipe.lrange(self.delays_key, 0, MAX_DELAYS - 1)
        fields, delays = pipe.execute()
        if not fields:
            return None
        n = int(fields.get(b"labels", 0))
        mean = (lambda f: float(fields.get(f, 0)) / n) if n else (lambda f: None)
        d = np.array([float(v) for v in delays]) if delays else None
        return {
            "labels": n,
            "loss": mean(b"loss_sum"),
            metric: mean(b"metric_sum"),
            "delay_p50_s": None if d is None else round(float(np.percentile(d, 50)), 3),
            "delay_p95_s": None if d is None else round(float(np.percentile(d, 95)), 3),
            "unknown": int(fields.get(b"unknown", 0)),
        }


def served_metric(task: str) -> str:
    """The served score's metric: accuracy for classifiers, mean absolute error else."""
    return "mae" if task == "regression" else "accuracy"
