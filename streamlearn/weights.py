"""The weights store: versioned blobs in Redis plus an announcement channel.

`sl:{model}:weights:{version}` holds each blob (the last K are kept),
`sl:{model}:weights:latest` the newest complete version (set after its blob, in one
transaction) and `sl:{model}:weights` announces it. A model with variants publishes
through `VariantWeights` (see `streamlearn.champion`).
"""

from __future__ import annotations

import redis

from streamlearn.config import BASE_VARIANT
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


# KEYS: the variant's blob, latest and version list; the champion pointer; the model's
# blob, latest and version list. ARGV: version, blob, variant, default champion, keep, the
# variant's and the model's blob key prefixes, the model's channel.
# All or nothing: an error when the version does not increase, else the variant's keys and,
# only if the variant is the champion at this moment, the model's keys too.
_PUBLISH = """
local v, keep = tonumber(ARGV[1]), tonumber(ARGV[5])
local function latest(key) return tonumber(redis.call('GET', key) or '0') end
local function put(blob, last, list, prefix)
  redis.call('SET', blob, ARGV[2])
  redis.call('SET', last, v)
  redis.call('RPUSH', list, v)
  while redis.call('LLEN', list) > keep do
    redis.call('DEL', prefix .. redis.call('LPOP', list))
  end
end
if v <= latest(KEYS[2]) then
  return redis.error_reply('version must increase: ' .. v .. ' <= ' .. latest(KEYS[2]))
end
local champion = (redis.call('GET', KEYS[4]) or ARGV[4]) == ARGV[3]
if champion and v <= latest(KEYS[6]) then
  return redis.error_reply('version must increase: ' .. v .. ' <= ' .. latest(KEYS[6]))
end
put(KEYS[1], KEYS[2], KEYS[3], ARGV[6])
if not champion then return 0 end
put(KEYS[5], KEYS[6], KEYS[7], ARGV[7])
redis.call('PUBLISH', ARGV[8], v)
return 1
"""


class VariantWeights:
    """One variant's weights: its own versions, and the model's while it is the champion.

    The variant's versions live under `sl:{model}:variant:VNAME:weights:*` (what its
    learner resumes from). A publish also goes to the model's `sl:{model}:weights:*`,
    the keys actors read, if and only if the champion pointer names this variant when
    it runs: the check and the writes are one Lua script, so a demoted champion can never
    publish to the model again. Versions are numbered above both namespaces' latest, so
    the model's versions keep increasing when the champion changes.
    """

    def __init__(self, client: redis.Redis, names: Names, variant: str, keep: int = 5) -> None:
        self.redis = client
        self.names = names.of_variant(variant)
        self.model = names
        self.variant = variant
        self.own = WeightsStore(client, self.names, keep)
        self.main = WeightsStore(client, names, keep)  # the model's: what actors read
        self.keep = keep
        self._publish = client.register_script(_PUBLISH)

    def latest_version(self) -> int:
        """The newest version of this variant or of the model, 0 when none."""
        own, main = self.redis.mget(self.names.latest_key, self.model.latest_key)
        return max(int(own or 0), int(main or 0))

    def publish(self, version: int, blob: bytes) -> bool:
        """Store `blob` as `version` of the variant, and of the model if it is the champion
        (returns whether it was); ValueError when `version` is not above both latest."""
        own, main = self.names, self.model
        try:
            champion = self._publish(
                keys=[
                    own.weights_key(version),
                    own.latest_key,
                    own.versions_key,
                    main.champion_key,
                    main.weights_key(version),
                    main.latest_key,
                    main.versions_key,
                ],
                args=[
                    version,
                    blob,
                    self.variant,
                    BASE_VARIANT,
                    self.keep,
                    own.weights_key(0)[:-1],  # what a version number is appended to
                    main.weights_key(0)[:-1],
                    main.weights_channel,
                ],
            )
        except redis.ResponseError as exc:
            if "version must increase" in str(exc):
                raise ValueError(str(exc)) from None
            raise
        return bool(champion)

    def fetch(self, version: int | None = None) -> tuple[int, bytes] | None:
        """The variant's blob (default: its latest); for `base` with none of its own yet,
        the model's latest (published before the model had variants)."""
        found = self.own.fetch(version)
        if found is None and version is None and self.variant == BASE_VARIANT:
            found = self.main.fetch()
        return found
