"""Loads the versions and labels that requests name, off the serving thread, while they wait.

A request for a version not held (`KeptVersions.split`'s misses) is parked here and its
version (or label) queued for one loader thread, which fetches it, builds a model or reuses
one and sets its weights (`KeptVersions.load`), then hands the requests that wait for it
back to the inbox: they rejoin a following batch, served by that version or, when it cannot
be served, refused from the cache of what the store lacks. The serving loop goes on with
everyone else's requests meanwhile.

Bounds: `MAX_WANTED` versions and labels queued, and parked requests at most the inbox's
own bounds (`max_queued_requests`, `max_queued_bytes` of their rows); a request past one
gets an error reply at once. A client (`predict/{client}`, or an HTTP client's address)
has `1 / CLIENT_SHARE` of each: past it, its own request is refused, so one client
cycling versions or labels leaves room for everyone else's (bare `predict`, which devices
cannot reach under the deploy ACL, has the whole). A parked request waits at most its deadline
(`request_deadline_ms`): the serving loop answers it then with the usual deadline error
(`expired`). Rejoining a full inbox, a request is shed as a new one would be.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable

from streamlearn.actor.inbox import CLIENT_SHARE, Pending
from streamlearn.actor.versions import KeptVersions, Ref
from streamlearn.errors import WeightsError

log = logging.getLogger(__name__)

MAX_WANTED = 64  # versions and labels waiting for the loader thread


class VersionLoader:
    """Parks requests for versions not held and loads those versions on its own thread.

    `rejoin(request, size)` hands a request back to the serving loop (the inbox's `offer`).
    """

    def __init__(
        self,
        versions: KeptVersions,
        rejoin: Callable[[Pending, int], bool],
        max_requests: int,
        max_bytes: int,
        deadline_ms: float,
    ) -> None:
        self.versions = versions
        self.rejoin = rejoin
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.deadline_s = deadline_ms / 1000
        self._parked: dict[Ref, list[Pending]] = {}
        self._count = self._bytes = 0
        self._by: dict[str, list[int]] = {}  # client -> [refs it queued, parked, their bytes]
        self._asked: dict[Ref, str] = {}  # a queued ref -> the client that queued it
        self._soonest = math.inf  # no parked request's deadline is sooner
        self._wanted: queue.Queue[Ref] = queue.Queue(MAX_WANTED)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="version-loader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None

    @property
    def parked(self) -> int:
        """Requests waiting for their version to be loaded."""
        return self._count

    def holds(self, p: Pending) -> bool:
        """Whether `p` is parked here."""
        with self._lock:
            return any(q is p for q in self._parked.get(p.version or "", []))

    def park(self, p: Pending) -> str | None:
        """Park `p` until its version is loaded (the serving thread); the reason it cannot
        be, when a bound is reached."""
        ref = p.version
        assert ref is not None  # a miss names a version or a label
        p.deadline = min(p.deadline, p.arrived + self.deadline_s)
        size = p.x.nbytes
        with self._lock:
            if self._count >= self.max_requests or self._bytes + size > self.max_bytes:
                return (
                    f"{self._count} requests ({self._bytes} bytes) wait for versions to "
                    "load already: retry later"
                )
            client = p.sharer  # None: bare `predict`, no share of its own
            mine = [0, 0, 0] if client is None else self._by.get(client, [0, 0, 0])
            if client is not None and (
                mine[1] >= max(1, self.max_requests // CLIENT_SHARE)
                or mine[2] + size > max(size, self.max_bytes // CLIENT_SHARE)
            ):
                return (
                    f"{mine[1]} of this client's requests ({mine[2]} bytes) wait for versions "
                    f"to load already, its share (1/{CLIENT_SHARE}): retry later"
                )
            waiting = self._parked.get(ref)
            if waiting is None:
                if client is not None and mine[0] >= MAX_WANTED // CLIENT_SHARE:
                    return (
                        f"{mine[0]} versions or labels this client asked for are loading "
                        f"already, its share (1/{CLIENT_SHARE}): retry later"
                    )
                try:
                    self._wanted.put_nowait(ref)
                except queue.Full:
                    return f"{MAX_WANTED} versions or labels are loading already: retry later"
                waiting = self._parked[ref] = []
                if client is not None:
                    mine[0] += 1
                    self._asked[ref] = client
            waiting.append(p)
            self._count += 1
            self._bytes += size
            if client is not None:
                mine[1] += 1
                mine[2] += size
                self._by[client] = mine
            self._soonest = min(self._soonest, p.deadline)
        return None

    def expired(self, now: float) -> list[Pending]:
        """The parked requests past their deadline, no longer parked (the serving thread)."""
        if now <= self._soonest:
            return []
        gone: list[Pending] = []
        with self._lock:
            for ref, waiting in list(self._parked.items()):
                kept = [p for p in waiting if p.deadline >= now]
                gone += [p for p in waiting if p.deadline < now]
                if kept:
                    self._parked[ref] = kept
                else:  # its load, when it ends, finds no one to hand back
                    del self._parked[ref]
            self._forget(gone)
            self._soonest = min(
                (p.deadline for w in self._parked.values() for p in w), default=math.inf
            )
        return gone

    def take_all(self) -> list[Pending]:
        """Every parked request, no longer parked (an actor stopping answers them)."""
        with self._lock:
            gone = [p for waiting in self._parked.values() for p in waiting]
            self._parked.clear()
            self._forget(gone)
            self._soonest = math.inf
        return gone

    # -- the loader's thread -------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ref = self._wanted.get(timeout=0.5)
            except queue.Empty:
                continue
            self._load(ref)

    def _load(self, ref: Ref) -> None:
        version: int | None = None
        try:  # unless everyone waiting for it gave up already
            if self._deadline(ref) >= time.monotonic():
                version = self.versions.load(ref, lambda: self._deadline(ref))
        except WeightsError:
            pass  # remembered: its requests are refused when they rejoin
        except Exception as exc:  # a bug must not leave them waiting, nor end the thread
            log.exception("loading %r for the requests that name it failed", ref)
            self.versions.remember(ref, f"internal error: {type(exc).__name__}: {exc}")
        with self._lock:
            waiting = self._parked.pop(ref, [])
            self._forget(waiting)
            asker = self._asked.pop(ref, None)
            if asker is not None:
                self._by[asker][0] -= 1
                self._drop_if_idle(asker)
        if version is not None and waiting:
            self.versions.keep_for(version, max(p.deadline for p in waiting))
            for p in waiting:
                p.version = version  # a label: the version it named when loaded
        for p in waiting:  # none loaded in time: they are past their deadline
            self.rejoin(p, p.x.nbytes)

    def _deadline(self, ref: Ref) -> float:
        """When the last request waiting for `ref` gives up (time.monotonic())."""
        with self._lock:
            return max((p.deadline for p in self._parked.get(ref, [])), default=-math.inf)

    def _forget(self, gone: list[Pending]) -> None:
        self._count -= len(gone)
        self._bytes -= sum(p.x.nbytes for p in gone)
        for p in gone:
            if p.sharer is not None:
                mine = self._by[p.sharer]
                mine[1] -= 1
                mine[2] -= p.x.nbytes
                self._drop_if_idle(p.sharer)

    def _drop_if_idle(self, client: str) -> None:
        """A client with nothing queued or parked leaves the table (it holds one per client
        with requests waiting, at most `max_requests`)."""
        if self._by[client] == [0, 0, 0]:
            del self._by[client]
