"""The weights store: versioned blobs in Redis plus an announcement channel.

`sl:{model}:weights:{version}` holds each blob (the last K are kept),
`sl:{model}:weights:latest` the newest complete version (set after its blob, in one
transaction) and `sl:{model}:weights` announces it.
"""

from __future__ import annotations

import redis

from streamlearn.names import Names


class WeightsStore:
    def __init__(self, client: redis.Redis, names: Names, keep: int = 5) -> None:
        self.redis = client
        self.names = names
        self.keep = keep

    def latest_version(self) -> int:
        """The newest published version, 0 when none."""
        value = self.redis.get(self.names.latest_key)
        return int(value) if value is not None else 0

    def publish(self, version: int, blob: bytes) -> None:
        """Store `blob` as `version`, then point `latest` at it, then announce it."""
        if version <= self.latest_version():
            raise ValueError(f"version must increase: {version} <= {self.latest_version()}")
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(self.names.weights_key(version), blob)
        pipe.set(self.names.latest_key, version)
        stale = version - self.keep
        if stale > 0:
            pipe.delete(self.names.weights_key(stale))
        pipe.execute()
        self.redis.publish(self.names.weights_channel, version)

    def fetch(self, version: int | None = None) -> tuple[int, bytes] | None:
        """A blob and its version (default: the latest), or None when there is none."""
        if version is None:
            version = self.latest_version()
        if version <= 0:
            return None
        blob = self.redis.get(self.names.weights_key(version))
        return None if blob is None else (version, blob)
