"""The weights store: versioned blobs in Redis plus an announcement channel.

The hash `sl:{model}:weights:blobs` holds each blob under its version,
`sl:{model}:weights:versions` the newest versions (the last `keep`),
`sl:{model}:weights:history` one version per `history.every_s` (the last `history`, scored
by publish time: what an operator rolls back to minutes later, however fast the learner
publishes), `sl:{model}:weights:latest` the newest complete version, and the channel
`sl:{model}:weights` announces the version actors should load. The store assigns versions:
one Lua script (`lua/weights_publish.lua`) numbers the blob above every published version,
writes it, trims the old ones and announces it, all or nothing. Every key a script touches
is passed to it (one hash slot per model, Redis Cluster ready).

An operator may pin a version (`sl:{model}:weights:pin`, `lua/weights_pin.lua`): actors
serve it instead of the latest until it is unpinned, the trim keeps it, and the learner
goes on publishing. Pin and unpin are announced on the same channel, with the version
actors should now serve, so they react at once. A rollback is a pin of an earlier version.

A variant of a model (`streamlearn.learner.variants`) keeps its own versions under
`sl:{model}:variant:VNAME:weights:*` (what its learner resumes from), and its blob also
becomes the model's, the keys actors read, if and only if the champion pointer names it
when the script runs.

A learner's store carries its lease (`streamlearn.store.lease`): the publish script writes
nothing unless the lease's token holds it then, and the store raises `LeaseLost`.
"""

from __future__ import annotations

from typing import cast

import redis
from redis.typing import EncodableT

from streamlearn.config.app import BASE_VARIANT
from streamlearn.contract.names import Names
from streamlearn.contract.schemas import LABEL
from streamlearn.errors import LeaseLost, WeightsError
from streamlearn.online import codec
from streamlearn.store import lua
from streamlearn.store.lease import Lease


class WeightsStore:
    """One model's weights, or with `variant` one variant's (and the model's while it is
    the champion)."""

    def __init__(
        self,
        client: redis.Redis,
        names: Names,
        variant: str | None = None,
        *,
        keep: int = 5,
        history: int = 60,
        history_every_s: float = 60.0,
        lease: Lease | None = None,
    ) -> None:
        """`lease`: the learner's, which fences its publishes (None: not fenced)."""
        self.redis = client
        self.lease = lease
        self.model = names
        self.variant = variant
        self.names = names if variant is None else names.of_variant(variant)
        self.keep = keep
        self.history = history
        self.history_every_ms = round(history_every_s * 1000)
        self._publish = lua.load(client, "weights_publish")
        self._pin = lua.load(client, "weights_pin")
        self._label = lua.load(client, "weights_label")

    def latest_version(self) -> int:
        """The newest version (of the variant or the model, whichever is higher); 0: none."""
        if self.variant is None:
            return int(self.redis.get(self.names.latest_key) or 0)
        own, model = self.redis.mget(self.names.latest_key, self.model.latest_key)
        return max(int(own or 0), int(model or 0))

    def publish(self, blob: bytes, after: int = 0) -> tuple[int, bool]:
        """Store `blob` as a new version above `after` and every published one; returns
        the version and whether it became the model's (always, without a variant).
        Raises `LeaseLost` when the store's lease is no longer its token's: nothing written."""
        own, model = self.names, self.model
        keys = _weights_keys(own)
        args: list[EncodableT] = [blob, after, self.keep, self.history_every_ms, self.history]
        args += [model.weights_channel]
        if self.variant is None:
            keys += [model.pin_key, model.labels_key]
        else:
            keys += [model.champion_key, *_weights_keys(model), model.pin_key, model.labels_key]
            args += [self.variant, BASE_VARIANT]
        lease = self.lease
        keys.append(own.lease_key if lease is None else lease.key)
        args.append("" if lease is None else lease.token)
        version, served = self._publish(keys=keys, args=args)
        if not int(version):
            raise LeaseLost(f"publish refused: lease {keys[-1]} is not {lease and lease.token}'s")
        return int(version), bool(served)

    def fetch(self, version: int | None = None) -> tuple[int, bytes] | None:
        """A blob and its version (default: the latest), or None when there is none. For
        the `base` variant with none of its own yet, the model's latest (published before
        the model had variants)."""
        found = self._fetch(self.names, version)
        if found is None and version is None and self.variant == BASE_VARIANT:
            found = self._fetch(self.model, None)
        return found

    def metadata(self, version: int | None = None) -> tuple[int, dict[str, str]]:
        """A version (default: the latest) and its blob's metadata (step, samples_seen...);
        (0, {}) when there is none."""
        found = self.fetch(version)
        return (0, {}) if found is None else (found[0], codec.decode(found[1])[1])

    # -- pinning (the model's keys, whatever the variant) --------------------------------

    def targets(self) -> tuple[int, int | None, dict[str, int]]:
        """The model's latest version, the pinned one (None: none) and the version labels,
        in one round trip of plain reads (all an actor's Redis account may run)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(self.model.latest_key)
        pipe.get(self.model.pin_key)
        pipe.hgetall(self.model.labels_key)
        latest, pinned, labels = pipe.execute()
        named = {k.decode(errors="replace"): int(v) for k, v in labels.items()}
        return int(latest or 0), None if pinned is None else int(pinned), named

    def pinned_version(self) -> int | None:
        pinned = self.redis.get(self.model.pin_key)
        return None if pinned is None else int(pinned)

    def versions(self) -> list[int]:
        """The model's versions kept in Redis, oldest first: the history and the newest."""
        return sorted(int(v) for v in self.redis.hkeys(self.model.blobs_key))

    def history_versions(self) -> list[tuple[int, float]]:
        """The model's history: (version, publish time in s since the epoch), oldest first."""
        kept = cast(
            list[tuple[bytes, float]],
            self.redis.zrange(self.model.history_key, 0, -1, withscores=True),
        )
        return [(int(v), at / 1000) for v, at in kept]

    def pin(self, version: int) -> None:
        """Make actors serve `version` until `unpin`; it must still be kept in Redis."""
        model = self.model
        keys = [model.pin_key, model.versions_key, model.history_key, model.blobs_key]
        self._kept_or_fail(
            self._pin(keys=keys, args=[int(version), model.weights_channel]), version
        )

    def label(self, label: str, version: int | None) -> None:
        """Let requests name `version` by `label` (None: remove the label); the trim keeps
        a labelled version. It must still be kept in Redis."""
        check_label(label)
        model = self.model
        keys = [model.labels_key, model.blobs_key]
        arg = "" if version is None else int(version)
        self._kept_or_fail(
            self._label(keys=keys, args=[label, arg, model.weights_channel]), version
        )

    def labels(self) -> dict[str, int]:
        """The model's version labels: `{"stable": 12}`."""
        return self.targets()[2]

    def _kept_or_fail(self, found: list, version: int | None = None) -> None:
        if not int(found[0]):
            kept = sorted(int(v) for v in found[1:])
            raise WeightsError(
                f"model {self.model.model!r} has no version {version} in Redis; "
                f"versions kept: {kept or 'none (nothing published yet)'}"
            )

    def unpin(self) -> int | None:
        """Return actors to the latest version; the version that was pinned, if any."""
        model = self.model
        pipe = self.redis.pipeline(transaction=True)
        pipe.getdel(model.pin_key)
        pipe.get(model.latest_key)
        pinned, latest = pipe.execute()
        if pinned is not None:  # announce the version actors go back to
            self.redis.publish(model.weights_channel, int(latest or 0))
        return None if pinned is None else int(pinned)

    def _fetch(self, names: Names, version: int | None) -> tuple[int, bytes] | None:
        if version is None:
            version = int(self.redis.get(names.latest_key) or 0)
        if version <= 0:
            return None
        blob = cast(bytes | None, self.redis.hget(names.blobs_key, version))
        return None if blob is None else (version, blob)


LATEST = "latest"  # the label every model has: its newest version


def check_label(label: str) -> None:
    """A version label: a letter, then up to 63 letters, digits, `_`, `.` or `-`; not `latest`.

    >>> check_label("stable")
    >>> check_label("7")
    Traceback (most recent call last):
    ...
    streamlearn.errors.WeightsError: label '7': a letter, then up to 63 letters, digits, _ . or -
    """
    if label == LATEST:
        raise WeightsError(f"label {LATEST!r} always names the newest version: choose another")
    if not LABEL.fullmatch(label):
        raise WeightsError(f"label {label!r}: a letter, then up to 63 letters, digits, _ . or -")


def _weights_keys(names: Names) -> list[str]:
    """The keys of one namespace the publish script writes, in its order."""
    return [names.latest_key, names.versions_key, names.history_key, names.blobs_key]
