"""A version per request: older versions kept loaded for the requests that name one.

A request may ask for a version (`"version": 12` over MQTT, `/v2/models/NAME/versions/12/
infer` over HTTP) or a label (`stable`, set by `streamlearn pin --label`; `latest` always
names the newest). What serves names none, or the version serving, rides the usual forward
pass; each other version is loaded from the weights store into a model of its own and kept,
least recently used first out, `actor.kept_versions` of them (each a copy of the model).

The first request for a version not loaded costs its fetch and load on the serving path
(~1-3 ms for the demo MLP), and, while fewer than `kept_versions` models exist, building one
(~0.1-0.5 s, once per model). Labels are read with each poll of the latest version; a
label not known yet is read again from the store before it is refused. A version the store
no longer keeps, or a label no one set, gets an error reply naming what there is.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import keras
import redis

from streamlearn.actor.inbox import Pending
from streamlearn.config.app import BASE_VARIANT
from streamlearn.contract import codec
from streamlearn.errors import WeightsError
from streamlearn.online import tensors
from streamlearn.store.weights import LATEST, WeightsStore

log = logging.getLogger(__name__)


@dataclass
class Group:
    """Requests one forward pass answers: of one version, in one model."""

    version: int
    variant: str
    model: keras.Model | None  # None: the serving model
    requests: list[Pending] = field(default_factory=list)


@dataclass
class _Loaded:
    model: keras.Model
    variant: str


class KeptVersions:
    """Loads and keeps the versions requests name (an LRU of `size` models).

    `build(variant)` returns a model of that variant, ready to serve (warmed up);
    `forget(model)` is told of one no longer kept.
    """

    def __init__(
        self,
        store: WeightsStore,
        build: Callable[[str], keras.Model],
        forget: Callable[[keras.Model], object],
        size: int,
    ) -> None:
        self.store = store
        self.build = build
        self.forget = forget
        self.size = size
        self.loads = 0  # versions loaded for requests (a build or a weights swap)
        self._loaded: OrderedDict[int, _Loaded] = OrderedDict()

    def split(
        self,
        batch: list[Pending],
        serving: tuple[int, str],
        latest: int,
        labels: dict[str, int],
        refuse: Callable[[Pending, str], None],
    ) -> list[Group]:
        """`batch` in groups by the version each asks (the serving one first); a request
        for a version there is not is answered by `refuse(request, reason)`."""
        version, variant = serving
        first = Group(version, variant, None)
        groups: dict[int, Group] = {version: first}
        for p in batch:
            if p.version is None:
                first.requests.append(p)
                continue
            try:
                wanted = self._resolve(p.version, latest, labels)
                group = groups.get(wanted)
                if group is None:
                    loaded = self._load(wanted)
                    group = groups[wanted] = Group(wanted, loaded.variant, loaded.model)
            except WeightsError as exc:
                refuse(p, str(exc))
                continue
            group.requests.append(p)
        return [g for g in groups.values() if g.requests]

    def kept(self) -> list[int]:
        """The versions loaded now, least recently used first."""
        return list(self._loaded)

    def _resolve(self, ref: int | str, latest: int, labels: dict[str, int]) -> int:
        if isinstance(ref, int):
            return ref
        if ref == LATEST:
            return latest
        if ref not in labels:  # set since the last poll? One read, only for a miss
            try:
                labels = self.store.labels()
            except redis.RedisError as exc:
                reason = f"label {ref!r}: the weights store is unavailable ({exc})"
                raise WeightsError(reason) from None
        if ref not in labels:
            known = ", ".join(sorted(labels)) or "none set"
            raise WeightsError(
                f"no version is labelled {ref!r}; labels: {LATEST} (always), {known} "
                f"(`streamlearn pin --label NAME --version N`)"
            )
        return labels[ref]

    def _load(self, version: int) -> _Loaded:
        loaded = self._loaded.get(version)
        if loaded is not None:
            self._loaded.move_to_end(version)
            return loaded
        started = time.perf_counter()
        try:
            found = self.store.fetch(version)
            kept = self.store.versions() if found is None else []
        except redis.RedisError as exc:
            reason = f"version {version}: the weights store is unavailable ({exc})"
            raise WeightsError(reason) from None
        if found is None:
            raise WeightsError(
                f"version {version} is not kept; versions kept: {kept or 'none yet'}"
            )
        try:
            arrays, meta = codec.decode(found[1])
            variant = meta.get("variant", BASE_VARIANT)
            model = self._slot(variant)
            codec.check_fits(arrays, tensors.spec(model))
        except (WeightsError, ValueError) as exc:
            raise WeightsError(f"version {version} cannot be served: {exc}") from None
        tensors.set_arrays(model, arrays)
        loaded = self._loaded[version] = _Loaded(model, variant)
        self.loads += 1
        took_ms = 1000 * (time.perf_counter() - started)
        log.info("loaded version %d for the requests that name it in %.1f ms", version, took_ms)
        return loaded

    def _slot(self, variant: str) -> keras.Model:
        """A model of `variant` to load a version into: a new one while fewer than `size`
        are kept, else the least recently used one's (rebuilt for another variant)."""
        if len(self._loaded) < self.size:
            return self.build(variant)
        _, oldest = self._loaded.popitem(last=False)
        if oldest.variant == variant:
            return oldest.model
        self.forget(oldest.model)
        return self.build(variant)
