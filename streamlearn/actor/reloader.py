"""Hot reload for actors: new weights are fetched, validated and staged off the serving path.

Acme's VariableClient pattern: the actor asks cheaply and often (`take()` between batches),
the fetch runs in the background, is skipped while one is in flight, blocks only on first
use, and a failed fetch keeps the last good weights. A version is loaded into a spare copy
of the model and staged, so the swap between batches exchanges two references instead of
assigning every variable on the serving path. The load runs off the lock that guards the
swap: a version being loaded never holds up the take of the one staged before it, so the
actor never serves a version older than the one staged. Three models of the serving
variant are kept: serving, staged, being loaded.

Variants (`streamlearn.learner.variants`): a blob's metadata names the variant that learned it.
When the champion changes, the first version of the new variant is loaded into a model
built for that variant's config, in the reload thread, and warmed up by the actor's `build`
callback before it is staged; the swap stays an exchange of references. Another variant
gets models as it needs them: one, then more only when a version of it comes while the last
is still being loaded.

Pinning (`WeightsStore.pin`): each poll reads the latest and the pinned version in one
round trip, and stages the pinned one while there is one, newer or older than what
serves; unpinned, only a version newer than the one staged. Pin and unpin are announced
on the weights channel, and the listener polls once more whenever it (re)subscribes, so
an actor that starts or reconnects reads the pin too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from streamlearn.actor.runtimes import Servable
from streamlearn.config.app import BASE_VARIANT
from streamlearn.errors import ConfigError, WeightsError
from streamlearn.online import codec
from streamlearn.store.weights import WeightsStore

log = logging.getLogger(__name__)

_REFUSED_KEPT = 16


@dataclass(frozen=True)
class Staged:
    """A validated version loaded into a model that is not serving yet."""

    version: int
    model: Servable
    fetched_at: float  # unix seconds
    stage_ms: float  # fetch, validation and loading (and a build), off the serving path
    variant: str = BASE_VARIANT


class WeightsReloader:
    """Keeps a spare model loaded with the newest valid version.

    Woken by the learner's announcement on the Redis channel, with a poll of `latest` every
    `check_ms` as the fallback. A blob that fails validation is refused once, with a log
    line, and remembered: it is not fetched again, and serving goes on with the old weights.

    `spares` are models of `variant`, the one serving (two: one staged while another loads);
    `build(name)` returns a ready (warmed up) model of another variant. Without it, another
    variant's blob is refused.
    """

    def __init__(
        self,
        store: WeightsStore,
        spares: list[Servable],
        check_ms: float,
        *,
        variant: str = BASE_VARIANT,
        build: Callable[[str], Servable] | None = None,
    ) -> None:
        self.store = store
        self.check_s = check_ms / 1000
        self.build = build
        self.refused: dict[int, str] = {}  # the last few, with the reason
        self.refusals = 0
        self.latest_seen = 0
        self.pinned: int | None = None  # the pinned version, as last read
        self.labels: dict[str, int] = {}  # version labels (`stable` -> 12), as last read
        # Bumped when the latest version, the pin or the labels read differ from the last
        # read: what an announcement brings (`KeptVersions` forgets what the store lacked).
        self.changes = 0
        self._targets: tuple[int, int | None, dict[str, int]] | None = None
        # Models not serving, by variant; a staged one is in _ready instead, one being
        # loaded in neither.
        self._spares: dict[str, list[Servable]] = {variant: list(spares)}
        self._specs = {variant: spares[0].spec}
        self._serving_variant = variant
        self._ready: Staged | None = None
        self._staged = 0
        self._lock = threading.Lock()  # guards the models; never held while loading one
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

    def take(self, serving: Servable) -> Staged | None:
        """The staged version, once; `serving` becomes a spare. Waits at most for the
        reload thread to exchange a few references (a load runs off the lock)."""
        with self._lock:
            staged, self._ready = self._ready, None
            if staged is not None:
                self._spares.setdefault(self._serving_variant, []).append(serving)
                self._serving_variant = staged.variant
            return staged

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
        target = 0
        try:
            targets = latest, self.pinned, self.labels = self.store.targets()
            if targets != self._targets:
                self._targets = targets
                self.changes += 1
            self.latest_seen = max(self.latest_seen, latest)
            target = self.pinned or latest
            if target == self._staged or target in self.refused:
                return
            if self.pinned is None and target < self._staged:
                return
            found = self.store.fetch(target)
            if found is None:
                if self.pinned is not None:  # kept while pinned: gone means removed by hand
                    raise WeightsError(f"pinned version {target} is not in Redis")
                return  # expired between the two reads: a newer one is announced
            arrays, meta = codec.decode(found[1])
            variant = meta.get("variant", BASE_VARIANT)
            if variant not in self._specs:  # a variant first seen: a model of it to load into
                self._give_back(variant, self._build(variant))
            codec.check_fits(arrays, self._specs[variant])
            self._stage(target, variant, arrays, started)
        except WeightsError as exc:
            self._refuse(target, str(exc))
        except (redis.ConnectionError, redis.TimeoutError, ValueError) as exc:
            log.warning("weights fetch failed, serving the current version: %s", exc)

    def _spare(self, variant: str) -> Servable:
        """A model of `variant` to load a version into: a spare; else the model of a staged
        version not taken yet (the version being loaded replaces it); else a new one."""
        with self._lock:
            if self._spares.get(variant):
                return self._spares[variant].pop()
            if self._ready is not None and self._ready.variant == variant:
                model, self._ready = self._ready.model, None
                return model
        return self._build(variant)

    def _give_back(self, variant: str, model: Servable) -> None:
        with self._lock:
            self._spares.setdefault(variant, []).append(model)

    def _build(self, variant: str) -> Servable:
        """A new model of `variant`, built outside the lock: the serving loop goes on
        serving (and taking staged versions) while it is built."""
        if self.build is None:
            raise WeightsError(f"learned by variant {variant!r}, which this actor cannot build")
        started = time.perf_counter()
        try:
            model = self.build(variant)
        except (ConfigError, ValueError, TypeError) as exc:
            raise WeightsError(f"cannot build variant {variant!r}: {exc}") from None
        built_ms = 1e3 * (time.perf_counter() - started)
        log.info("built and warmed up a model for variant %s in %.0f ms", variant, built_ms)
        self._specs[variant] = model.spec
        return model

    def _stage(self, version: int, variant: str, arrays: dict, started: float) -> None:
        """Load `arrays` into a spare off the lock, then stage it in place of any version
        staged and not taken yet (whose model becomes a spare)."""
        model = self._spare(variant)
        model.load(arrays)
        stage_ms = (time.perf_counter() - started) * 1000
        with self._lock:
            if self._ready is not None:
                self._spares.setdefault(self._ready.variant, []).append(self._ready.model)
            self._ready = Staged(version, model, time.time(), stage_ms, variant)
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
