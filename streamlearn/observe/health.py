"""Liveness and readiness of one worker process, served as /livez and /readyz.

A TCP connection to the broker says nothing about a learner stuck in a step or an actor
with no weights to serve; these say what an operator (or compose's healthcheck) needs:

- live: the process's main loop still turns (`Health.beat`, called every iteration);
  a loop that has not come round for `stall_s` is hung, and restarting it is the cure.
- ready: every check passes. A check is a callable returning None when it passes and
  otherwise a short reason ("no weights yet"); each role's process (`ROLE/worker.py`)
  adds its own. The verdict is kept for `READY_CACHE_S`: a burst of probes (an
  orchestrator, a scraper, someone's curl loop) costs one round of checks (Redis round
  trips included) per interval, not one per probe.

>>> health = Health("actor")
>>> health.add("weights", lambda: "no weights yet")
>>> health.ready()
Verdict(ok=False, detail={'role': 'actor', 'weights': 'no weights yet'})

A worker that is stopping says so at once, whatever the checks (`withdraw`):

>>> health.withdraw("stopping")
>>> health.ready().detail
{'role': 'actor', 'stopping': 'stopping'}
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import paho.mqtt.client as paho
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from streamlearn.store import redis_client

Check = Callable[[], str | None]

LIVE_STALL_S = 60.0  # a main loop silent this long is hung
PROGRESS_STALL_S = 30.0  # a learner with a backlog and no step this long is stuck
READY_CACHE_S = 1.0  # a readiness verdict is answered again for this long


@dataclass(frozen=True)
class Verdict:
    """The answer of /livez or /readyz: `ok` (200) or not (503), and why."""

    ok: bool
    detail: dict[str, object] = field(default_factory=dict)


class Health:
    """What one worker process says about itself: a heartbeat and readiness checks."""

    def __init__(
        self,
        role: str,
        stall_s: float = LIVE_STALL_S,
        clock: Callable[[], float] = time.monotonic,
        ready_cache_s: float = READY_CACHE_S,
    ) -> None:
        self.role = role
        self.stall_s = stall_s
        self.clock = clock
        self.ready_cache_s = ready_cache_s
        self.checks: list[tuple[str, Check]] = []
        self._beat = clock()
        self._ready: tuple[float, Verdict] | None = None  # (when, verdict)
        self._ready_lock = threading.Lock()  # probes come on the HTTP server's threads
        self.withdrawn: str | None = None  # why it is stopping (never ready again)

    def beat(self) -> None:
        """Called by the main loop at every turn (cheap: one clock read)."""
        self._beat = self.clock()

    def add(self, name: str, check: Check) -> None:
        self.checks.append((name, check))
        self._ready = None

    def withdraw(self, reason: str) -> None:
        """Not ready from now on, and at once: not after the cached verdict's interval (an
        actor that stops takes itself out of a Service's endpoints first)."""
        self.withdrawn = reason

    def live(self) -> Verdict:
        silent_s = self.clock() - self._beat
        ok = silent_s < self.stall_s
        detail: dict[str, object] = {"role": self.role, "loop_silent_s": round(silent_s, 3)}
        if not ok:
            detail["reason"] = f"main loop has not turned for {silent_s:.0f} s"
        return Verdict(ok, detail)

    def ready(self) -> Verdict:
        """Every check, each answering "ok" or why not; a check that raises fails.

        The verdict is reused for `ready_cache_s`; concurrent probes wait for the one
        round of checks in flight rather than each starting their own.
        """
        if self.withdrawn is not None:
            return Verdict(False, {"role": self.role, "stopping": self.withdrawn})
        with self._ready_lock:
            if self._ready is None or self.clock() - self._ready[0] >= self.ready_cache_s:
                verdict = self._check()  # stamped after: a slow check still counts
                self._ready = (self.clock(), verdict)
            return self._ready[1]

    def _check(self) -> Verdict:
        detail: dict[str, object] = {"role": self.role}
        ok = True
        for name, check in self.checks:
            try:
                reason = check()
            except Exception as exc:  # a probe must answer, whatever broke
                reason = f"check failed: {type(exc).__name__}: {exc}"
            detail[name] = reason or "ok"
            ok = ok and reason is None
        return Verdict(ok, detail)


# -- checks the roles share ------------------------------------------------------------


def broker_connected(client: paho.Client) -> Check:
    """Passes while the MQTT client is connected (paho reconnects on its own)."""
    return lambda: None if client.is_connected() else "not connected to the MQTT broker"


def quick_redis(url: str) -> redis.Redis:
    """A Redis client for probes: no retries, one-second timeouts, so that a probe of a
    worker whose Redis is gone answers 503 at once rather than after the workers' backoff."""
    return redis_client.connect(
        url,
        probe_s=1.0,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        retry=Retry(NoBackoff(), 0),
    )


def redis_reachable(client: redis.Redis) -> Check:
    def check() -> str | None:
        try:
            client.ping()
        except redis.RedisError as exc:
            return f"Redis unreachable: {exc}"
        return None

    return check


class Progress:
    """A check that fails while work waits and nothing gets done: `backlog()` > 0 and
    `done()` (a count that grows with the work) unchanged for `stall_s`.

    The count is sampled at each probe, so the stall clock starts at the first probe that
    sees a backlog, and an idle worker (no backlog) is never stuck.
    """

    def __init__(
        self,
        done: Callable[[], int],
        backlog: Callable[[], int | None],
        stall_s: float = PROGRESS_STALL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.done = done
        self.backlog = backlog
        self.stall_s = stall_s
        self.clock = clock
        self._count: int | None = None
        self._moved = clock()
        self._lock = threading.Lock()  # probes come on the HTTP server's threads

    def __call__(self) -> str | None:
        waiting = self.backlog() or 0
        with self._lock:
            now, count = self.clock(), self.done()
            if count != self._count or waiting <= 0:
                self._count, self._moved = count, now
                return None
            still_s = now - self._moved
        if still_s < self.stall_s:
            return None
        return f"{waiting} samples waiting and none trained for {still_s:.0f} s"
