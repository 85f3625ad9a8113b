"""A version per request: older versions kept loaded for the requests that name one.

A request may ask for a version (`"version": 12` over MQTT, `/v2/models/NAME/versions/12/
infer` over HTTP) or a label (`stable`, set by `streamlearn pin --label`; `latest` always
names the newest). What serves names none, or the version serving, rides the usual forward
pass; each other version is held in a model of its own, `actor.kept_versions` of them (each
a copy of the model), least recently used first out.

The serving thread only looks up (`split`), with no Redis round trip: a version held joins
the batch; one not held is a miss that `streamlearn.actor.loader` loads on its own thread
(`load`) while its requests wait; a version the store does not keep, or a label no one set,
is refused from a cache of what the store lacks, good until the next announcement of
versions or labels (`epoch`), when it is read again.

A batch leases the models it uses until its forward passes are done (`release`), and a
model just loaded is kept for the requests that wait for it until they are served or past
their deadline: a load never evicts or overwrites either. When every model is in use, a
load waits for one to come free, at most until its requests' deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from streamlearn.actor.inbox import Pending
from streamlearn.actor.runtimes import Servable
from streamlearn.config.app import BASE_VARIANT
from streamlearn.errors import ConfigError, WeightsError
from streamlearn.online import codec
from streamlearn.store.weights import LATEST, WeightsStore

log = logging.getLogger(__name__)

MAX_UNKNOWN = 1024  # versions and labels remembered as missing (oldest out)
_REASON_CHARS = 512  # of each one's reason: the cache holds well under 1 MiB
_UNAVAILABLE_S = 1.0  # a store that could not be read is asked again after this
_WAIT_S = 0.05  # a load waiting for a model looks again at least this often

Ref = int | str  # a version, or a label


@dataclass
class Group:
    """Requests one forward pass answers: of one version, in one model."""

    version: int
    variant: str
    model: Servable | None  # None: the serving model
    requests: list[Pending] = field(default_factory=list)


@dataclass
class _Held:
    model: Servable
    variant: str
    leases: int = 0  # batches whose forward pass uses it now
    wanted_until: float = 0.0  # kept for the requests that wait for it: until they are served


@dataclass(frozen=True)
class _Missing:
    reason: str
    epoch: int  # of the announcements when the store was read
    until: float  # time.monotonic()


class KeptVersions:
    """Holds the versions requests name (`size` models, least recently used first out).

    `build(variant)` returns a model of that variant, ready to serve (warmed up);
    `forget(model)` is told of one no longer held; `epoch()` changes whenever the versions
    or labels announced do (`WeightsReloader.changes`).
    """

    def __init__(
        self,
        store: WeightsStore,
        build: Callable[[str], Servable],
        forget: Callable[[Servable], object],
        size: int,
        epoch: Callable[[], int] = lambda: 0,
    ) -> None:
        self.store = store
        self.build = build
        self.forget = forget
        self.size = size
        self.epoch = epoch
        self.loads = 0  # versions loaded for requests (a build or a weights swap)
        self._held: OrderedDict[int, _Held] = OrderedDict()
        self._loading = 0  # models taken for a load, not held yet
        self._missing: OrderedDict[Ref, _Missing] = OrderedDict()
        self._cond = threading.Condition()  # the serving thread and the loader's

    def split(
        self,
        batch: list[Pending],
        serving: tuple[int, str],
        latest: int,
        labels: dict[str, int],
        refuse: Callable[[Pending, str], None],
    ) -> tuple[list[Group], list[Pending]]:
        """`batch` in groups by the version each asks (the serving one first), and the
        requests for a version not held (to load). The groups' models are leased: give
        them back with `release` after the forward passes. A request for a version or
        label known missing is answered by `refuse(request, reason)`."""
        version, variant = serving
        first = Group(version, variant, None)
        groups: dict[int, Group] = {version: first}
        misses: list[Pending] = []
        refused: list[tuple[Pending, str]] = []
        epoch, now = self.epoch(), time.monotonic()
        with self._cond:
            for p in batch:
                ref = p.version
                if ref is None:
                    first.requests.append(p)
                    continue
                if ref == LATEST:
                    wanted: Ref = latest
                else:
                    wanted = labels.get(ref, ref) if isinstance(ref, str) else ref
                group = groups.get(wanted) if isinstance(wanted, int) else None
                if group is None:
                    group = self._lease(wanted)
                if group is None:
                    reason = self._known_missing(wanted, epoch, now)
                    if reason is None:
                        p.version = wanted  # a label known: its version, as of now
                        misses.append(p)
                    else:
                        refused.append((p, reason))
                    continue
                groups[group.version] = group
                group.requests.append(p)
        for p, reason in refused:
            refuse(p, reason)
        return [g for g in groups.values() if g.requests], misses

    def release(self, groups: list[Group]) -> None:
        """The forward passes of `groups` (from `split`) are done: their models may go."""
        with self._cond:
            for group in groups:
                held = self._held.get(group.version)
                if group.model is not None and held is not None and held.model is group.model:
                    held.leases -= 1
            self._cond.notify_all()

    def kept(self) -> list[int]:
        """The versions held now, least recently used first."""
        with self._cond:
            return list(self._held)

    # -- the loader's thread -------------------------------------------------------------

    def load(self, ref: Ref, deadline: Callable[[], float]) -> int | None:
        """Hold the version `ref` names (the loader's thread; Redis round trips and maybe a
        model build). Returns the version, or None when no model came free before
        `deadline()` (time.monotonic()). WeightsError when it cannot be served: the
        reason is remembered, and refuses its requests until the next announcement."""
        epoch = self.epoch()  # before the reads: what an announcement after them brings
        key, for_s = ref, float("inf")
        try:
            version = key = self._version_of(ref)
            with self._cond:
                if version in self._held:
                    return version
            found = self.store.fetch(version)
            if found is None:
                kept = self.store.versions()
                raise WeightsError(
                    f"version {version} is not kept; versions kept: {kept or 'none yet'}"
                )
            return self._hold(version, found[1], deadline)
        except redis.RedisError as exc:
            reason = f"{_named(ref)}: the weights store is unavailable ({exc})"
            for_s = _UNAVAILABLE_S
        except WeightsError as exc:
            reason = str(exc)
        for missing in {ref, key}:  # a label's requests may find it resolved, or not yet
            self._remember(missing, reason, epoch, for_s)
        raise WeightsError(reason)

    def keep_for(self, version: int, until: float) -> None:
        """Keep `version` for requests that wait for it, until they are served or `until`."""
        with self._cond:
            held = self._held.get(version)
            if held is not None:
                held.wanted_until = max(held.wanted_until, until)

    def remember(self, ref: Ref, reason: str, for_s: float = _UNAVAILABLE_S) -> None:
        """Refuse requests for `ref` with `reason` for a while (the loader failed)."""
        self._remember(ref, reason, self.epoch(), for_s)

    # -- helpers -------------------------------------------------------------------------

    def _lease(self, wanted: Ref) -> Group | None:
        """A group for the version `wanted`, its model leased; None when it is not held."""
        if not isinstance(wanted, int) or (held := self._held.get(wanted)) is None:
            return None
        held.leases += 1
        held.wanted_until = 0.0  # served: its waiters no longer hold it
        self._held.move_to_end(wanted)
        return Group(wanted, held.variant, held.model)

    def _known_missing(self, ref: Ref, epoch: int, now: float) -> str | None:
        missing = self._missing.get(ref)
        if missing is None:
            return None
        if missing.epoch == epoch and now < missing.until:
            return missing.reason
        del self._missing[ref]  # an announcement since, or a while: read the store again
        return None

    def _remember(self, ref: Ref, reason: str, epoch: int, for_s: float = float("inf")) -> None:
        with self._cond:
            self._missing.pop(ref, None)
            self._missing[ref] = _Missing(reason[:_REASON_CHARS], epoch, time.monotonic() + for_s)
            while len(self._missing) > MAX_UNKNOWN:
                self._missing.popitem(last=False)

    def _version_of(self, ref: Ref) -> int:
        if isinstance(ref, int):
            return ref
        labels = self.store.labels()  # `latest` never misses: only a label does
        if ref not in labels:
            known = ", ".join(sorted(labels)) or "none set"
            raise WeightsError(
                f"no version is labelled {ref!r}; labels: {LATEST} (always), {known} "
                f"(`streamlearn pin --label NAME --version N`)"
            )
        return labels[ref]

    def _hold(self, version: int, blob: bytes, deadline: Callable[[], float]) -> int | None:
        started = time.perf_counter()
        try:
            arrays, meta = codec.decode(blob)
            variant = meta.get("variant", BASE_VARIANT)
            model = self._slot(variant, deadline)
        except (WeightsError, ValueError) as exc:
            raise WeightsError(f"version {version} cannot be served: {exc}") from None
        if model is None:
            return None
        try:
            codec.check_fits(arrays, model.spec)
            model.load(arrays)
        except Exception as exc:
            self._drop(model)  # what it held is gone already
            if not isinstance(exc, WeightsError | ValueError):
                raise
            raise WeightsError(f"version {version} cannot be served: {exc}") from None
        with self._cond:
            self._loading -= 1
            self._held[version] = _Held(model, variant)
            self.loads += 1
        took_ms = 1000 * (time.perf_counter() - started)
        log.info("loaded version %d for the requests that name it in %.1f ms", version, took_ms)
        return version

    def _slot(self, variant: str, deadline: Callable[[], float]) -> Servable | None:
        """A model of `variant` to load a version into: a new one while fewer than `size`
        exist, else the least recently used one no batch or waiting request holds (rebuilt
        for another variant); None when none came free before `deadline()`."""
        with self._cond:
            while True:
                if len(self._held) + self._loading < self.size:
                    freed = None
                    break
                now = time.monotonic()
                free = [v for v, h in self._held.items() if not h.leases and h.wanted_until < now]
                if free:
                    freed = self._held.pop(free[0])
                    break
                if now >= deadline():
                    return None
                self._cond.wait(min(_WAIT_S, deadline() - now))
            self._loading += 1
        if freed is not None and freed.variant == variant:
            return freed.model
        if freed is not None:
            self.forget(freed.model)
        try:
            return self.build(variant)
        except (ConfigError, ValueError, TypeError) as exc:
            with self._cond:
                self._loading -= 1
            raise WeightsError(f"cannot build variant {variant!r}: {exc}") from None

    def _drop(self, model: Servable) -> None:
        self.forget(model)
        with self._cond:
            self._loading -= 1


def _named(ref: Ref) -> str:
    return f"version {ref}" if isinstance(ref, int) else f"label {ref!r}"
