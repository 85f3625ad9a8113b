"""Redis calls the learner tries again later instead of failing.

While Redis refuses writes (full under `noeviction`, a replica, restarting, unreachable)
the learner goes on training on what it has read: a refused publish, status report,
acknowledgement, trim or read is tried again after a capped exponential backoff, and
the condition shows in the status (`redis_oom`, failures by call) and the metrics.
Nothing here is fatal; an error other than a `redis.RedisError` is a bug and propagates.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.backoff import ExponentialBackoff

log = logging.getLogger(__name__)

T = TypeVar("T")

CALLS = ("publish", "ack", "trim", "status", "read", "deadletter")  # the learner's


class RedisHealth:
    """What the learner reports about its Redis calls: failures by call, and whether one
    of them was last refused because Redis is out of memory."""

    def __init__(self) -> None:
        self.failures: dict[str, int] = {}
        self.last_error: str | None = None
        self._refused: set[str] = set()  # calls whose last try met OOM
        self._lock = threading.Lock()  # the read-ahead thread reports too

    @property
    def oom(self) -> bool:
        return bool(self._refused)

    def failed(self, call: str, exc: redis.RedisError) -> None:
        with self._lock:
            self.failures[call] = self.failures.get(call, 0) + 1
            self.last_error = f"{call}: {exc}"
            if isinstance(exc, redis.exceptions.OutOfMemoryError):
                self._refused.add(call)
            else:
                self._refused.discard(call)

    def succeeded(self, call: str) -> None:
        with self._lock:
            self._refused.discard(call)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "redis_oom": self.oom,
                "redis_failures": dict(self.failures),
                "last_redis_error": self.last_error,
            }

    def metrics(self) -> dict[str, Any]:
        with self._lock:
            counts = {f"{c}_failures_total": self.failures.get(c, 0) for c in CALLS}
            return {"redis_oom": int(self.oom), **counts}


class Retried:
    """One kind of Redis call that may be refused, and when to try it again.

    >>> calls = Retried("publish", RedisHealth(), max_s=1.0, clock=lambda: 0.0)
    >>> calls.run(lambda: None), calls.due()
    (True, True)
    """

    def __init__(
        self,
        call: str,
        health: RedisHealth,
        max_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.call = call
        self.health = health
        self.clock = clock
        self.failures = 0  # in a row
        self._backoff = ExponentialBackoff(cap=max_s, base=min(0.05, max_s))
        self._next = -math.inf

    def due(self) -> bool:
        """Whether the backoff after the last failure is over (always, after a success)."""
        return self.clock() >= self._next

    def delay(self) -> float:
        """Seconds until due."""
        return max(0.0, self._next - self.clock())

    def result(self, fn: Callable[[], T]) -> T | None:
        """`fn()`'s result; None, logged and scheduled for later, if Redis failed it."""
        try:
            result = fn()
        except redis.RedisError as exc:
            self.failed(exc)
            return None
        self.succeeded()
        return result

    def run(self, fn: Callable[[], object]) -> bool:
        """`fn()`; False, logged and scheduled for later, if Redis failed it."""

        def done() -> bool:
            fn()
            return True

        return bool(self.result(done))

    def failed(self, exc: redis.RedisError) -> None:
        self.failures += 1
        self.health.failed(self.call, exc)
        wait = self._backoff.compute(self.failures)
        self._next = self.clock() + wait
        log.warning(
            "redis refused %s (%s); failure %d in a row, next try in %.2f s",
            self.call,
            exc,
            self.failures,
            wait,
        )

    def succeeded(self) -> None:
        """Clear the backoff; free (no lock taken) after a success, so hot paths call it."""
        if not self.failures:
            return  # nothing to clear: only failed() sets the backoff and the OOM flag
        log.info("redis took %s again after %d failures", self.call, self.failures)
        self.failures = 0
        self._next = -math.inf
        self.health.succeeded(self.call)
