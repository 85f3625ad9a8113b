"""Hot reload for actors: new weights are fetched, validated and staged off the serving path.

Acme's VariableClient pattern: the actor asks cheaply and often (`take()` between batches),
the fetch runs in the background, is skipped while one is in flight, blocks only on first
use, and a failed fetch keeps the last good weights. A version is staged into a second copy
of the model, so the swap between batches exchanges two references instead of assigning
every variable on the serving path (about a millisecond for a small MLP on 2 cores).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import keras
import redis

from streamlearn import codec, models
from streamlearn.errors import WeightsError
from streamlearn.weights import WeightsStore

log = logging.getLogger(__name__)

_REFUSED_KEPT = 16


@dataclass(frozen=True)
class Staged:
    """A validated version loaded into a model that is not serving yet."""

    version: int
    model: keras.Model
    fetched_at: float  # unix seconds
    stage_ms: float  # fetch, validation and loading, off the serving path


class WeightsReloader:
    """Keeps a spare model loaded with the newest valid version.

    Woken by the learner's announcement on the Redis channel, with a poll of `latest` every
    `check_ms` as the fallback. A blob that fails validation is refused once, with a log
    line, and remembered: it is not fetched again, and serving goes on with the old weights.
    """

    def __init__(self, store: WeightsStore, spare: keras.Model, check_ms: float) -> None:
        self.store = store
        self.spec = models.spec(spare)
        self.check_s = check_ms / 1000
        self.refused: dict[int, str] = {}  # the last few, with the reason
        self.refusals = 0
        self.latest_seen = 0
        self._spare: keras.Model | None = spare  # exactly one of _spare, _ready holds it
        self._ready: Staged | None = None
        self._staged = 0
        self._lock = threading.Lock()  # guards the models; held while loading one
        self._fetching = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._stop.clear()
        for target in (self._listen, self._loop):
            thread = threading.Thread(target=target, name=f"reload{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(2.0)
        self._threads.clear()

    def take(self, serving: keras.Model, block: bool = False) -> Staged | None:
        """The staged version, once; `serving` becomes the spare. Never waits unless `block`."""
        if not self._lock.acquire(blocking=block):
            return None  # a version is being loaded: the next batch gets it
        try:
            staged, self._ready = self._ready, None
            if staged is not None:
                self._spare = serving
            return staged
        finally:
            self._lock.release()

    def poll(self, block: bool = False) -> None:
        """Stage the latest version if it is new; skipped while a fetch is in flight."""
        if not self._fetching.acquire(blocking=block):
            return
        try:
            self._fetch_latest()
        finally:
            self._fetching.release()

    # -- helpers -------------------------------------------------------------------------

    def _fetch_latest(self) -> None:
        started = time.perf_counter()
        latest = 0
        try:
            latest = self.store.latest_version()
            self.latest_seen = max(self.latest_seen, latest)
            if latest <= self._staged or latest in self.refused:
                return
            found = self.store.fetch(latest)
            if found is None:  # expired between the two reads: a newer one is announced
                return
            arrays, _ = codec.decode(found[1])
            codec.check_fits(arrays, self.spec)
            self._stage(latest, arrays, started)
        except WeightsError as exc:
            self._refuse(latest, str(exc))
        except (redis.ConnectionError, redis.TimeoutError, ValueError) as exc:
            log.warning("weights fetch failed, serving the current version: %s", exc)

    def _stage(self, version: int, arrays: dict, started: float) -> None:
        with self._lock:
            if self._ready is not None:  # replace a staged version that was not taken yet
                self._spare, self._ready = self._ready.model, None
            assert self._spare is not None
            models.set_arrays(self._spare, arrays)
            stage_ms = (time.perf_counter() - started) * 1000
            self._ready = Staged(version, self._spare, time.time(), stage_ms)
            self._spare = None
            self._staged = version

    def _refuse(self, version: int, reason: str) -> None:
        log.error("refused weights v%d, serving the previous version: %s", version, reason)
        self.refused[version] = reason
        self.refusals += 1
        for old in sorted(self.refused)[:-_REFUSED_KEPT]:
            del self.refused[old]

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.check_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.poll()
            except Exception:  # a dead reload thread would serve stale weights silently
                log.exception("weights reload failed, serving the current version")

    def _listen(self) -> None:
        while not self._stop.is_set():
            pubsub = self.store.redis.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self.store.names.weights_channel)
                self._wake.set()  # catch up on announcements missed while not subscribed
                while not self._stop.is_set():
                    if pubsub.get_message(timeout=0.5) is not None:
                        self._wake.set()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("weights announcements lost, polling until back: %s", exc)
                self._stop.wait(1.0)
            finally:
                pubsub.close()
