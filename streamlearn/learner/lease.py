"""One learner per model: the learner waits for its lease, keeps it, and stops when it is lost.

A learner takes its lease (`streamlearn.store.lease`) before it resumes and trains; while
another holds it, it waits (said once per holder) and tries again every `renew_s`. Holding
it, a thread of its own renews it every `renew_s`, so no renewal stalls a step. The loop
asks `check()` each turn, a clock read: once a renewal was refused (the lease expired or was
taken) or none succeeded for `ttl_s` (the key has expired in Redis by then), it raises
`LeaseLost` and the learner stops without publishing or checkpointing again. The publish
script checks the token itself as it writes, so the local view only has to be prompt,
not exact.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

import redis

from streamlearn.config.policies import LeasePolicy
from streamlearn.errors import LeaseLost
from streamlearn.store.lease import Holder, Lease

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Takes `lease`, renews it from a thread, and says when it was lost."""

    def __init__(
        self, lease: Lease, policy: LeasePolicy, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.lease = lease
        self.ttl_s = policy.ttl_s
        self.renew_s = policy.renew_s
        self.clock = clock
        self.valid_until = -math.inf  # no renewal since: the key has expired in Redis
        self.lost: str | None = None  # why, once lost
        self.taken = self.losses = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def token(self) -> str:
        return self.lease.token

    def held(self) -> bool:
        """Whether this learner holds the lease, as far as it knows (a clock read)."""
        return self.lost is None and self.clock() < self.valid_until

    def check(self) -> None:
        """Raise `LeaseLost` unless the lease is held (the loop asks every turn)."""
        if not self.held():
            self.lose(self.lost or f"not renewed for {self.ttl_s:g} s")
            raise LeaseLost(f"lease {self.lease.key} lost: {self.lost}")

    def wait(self, stop: threading.Event, beat: Callable[[], object] = lambda: None) -> bool:
        """Take the lease, waiting while another learner holds it; then keep it renewed.
        False when `stop` was set first. `beat()` at every try: waiting is not hanging."""
        said: str | None = None
        while not stop.is_set():
            beat()
            started = self.clock()
            try:
                if self.lease.take():
                    self._taken(started)
                    return True
                holder = self.lease.holder()
            except redis.RedisError as exc:
                log.warning("lease %s: redis unavailable (%s), trying again", self.lease.key, exc)
                holder = None
            if holder is not None and holder.token != said:
                said = holder.token
                log.warning(
                    "learner lease %s held by %s (for %.1f s more unless renewed): waiting",
                    self.lease.key,
                    holder.token,
                    holder.expires_in_s,
                )
            stop.wait(self.renew_s)
        return False

    def _taken(self, at: float) -> None:
        self.valid_until = at + self.ttl_s
        self.lost = None
        self.taken += 1
        log.info("learner lease %s taken as %s", self.lease.key, self.token)
        self._stop.clear()
        self._thread = threading.Thread(target=self._keep, name="lease", daemon=True)
        self._thread.start()

    def _keep(self) -> None:
        """Renew every `renew_s` until stopped or lost; a Redis error is tried again until
        the lease would have expired."""
        while not self._stop.wait(self.renew_s) and self.lost is None:
            started = self.clock()
            try:
                renewed = self.lease.renew()
            except redis.RedisError as exc:
                if self.clock() >= self.valid_until:
                    self.lose(f"not renewed for {self.ttl_s:g} s ({exc})")
                continue
            if renewed:
                self.valid_until = started + self.ttl_s
            else:
                holder = self._holder()
                self.lose(f"taken by {holder.token}" if holder else "expired")

    def _holder(self) -> Holder | None:
        try:
            return self.lease.holder()
        except redis.RedisError:
            return None

    def lose(self, why: str) -> None:
        """Mark the lease lost (once): the learner stops publishing and waits again."""
        with self._lock:
            if self.lost is not None:
                return
            self.lost = why
            self.losses += 1
        self.valid_until = -math.inf
        log.error(
            "learner lease %s lost (%s): %s stops publishing and waits for it again",
            self.lease.key,
            why,
            self.token,
        )

    def release(self) -> None:
        """Stop renewing and, still held, release the lease: a waiting learner takes over
        at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.lost is None:
            try:
                self.lease.release()
            except redis.RedisError as exc:  # it lapses after the TTL instead
                log.warning("lease %s not released (%s)", self.lease.key, exc)
        self.valid_until = -math.inf

    def status(self) -> dict[str, object]:
        """The learner's status's `lease` (§2.4): its token, whether it holds the lease,
        and for how long more unless renewed."""
        left = self.valid_until - self.clock()
        return {
            "holder": self.token,
            "held": self.held(),
            "expires_in_s": round(left, 1) if left > 0 else 0.0,
        }

    def metrics(self) -> dict[str, int]:
        return {
            "lease_held": int(self.held()),
            "lease_taken_total": self.taken,
            "lease_lost_total": self.losses,
        }
