"""A learner's lease: the key that says which learner of a model (or variant) may publish.

`sl:{model}:learner:lease` (a variant's learner: `sl:{model}:variant:V:learner:lease`)
holds its holder's token with a TTL. A learner takes it (`lua/lease_take.lua`: SET NX PX),
renews it well within the TTL (`lua/lease_renew.lua`: only while it still holds it) and
releases it on a clean stop (`lua/lease_release.lua`); all three run on a full Redis
(`allow-oom`), whose memory only a learner that keeps checkpointing frees. The weights
store hands the key and the token to its publish script, which writes nothing unless that
token holds the lease as it runs (`lua/weights_publish.lua`): a learner that lost its lease
cannot publish, whatever it believes; its promoter does the same with the promotion script
(`lua/champion_promote.lua`), so it cannot promote either.
`streamlearn.learner.lease.LeaseKeeper` does the waiting and the renewing.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass

import redis

from streamlearn.contract.names import Names
from streamlearn.store import lua


def new_token() -> str:
    """A token unique to this process: its host, its pid and 8 random hex digits.

    >>> host, pid, tail = new_token().split("/")
    >>> int(pid) == os.getpid(), len(tail)
    (True, 8)
    """
    return f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Holder:
    """Who holds a lease, and for how long more unless renewed."""

    token: str
    expires_in_s: float


class Lease:
    """One learner's lease on `names`'s weights (`names.lease_key`), as `token`."""

    def __init__(
        self, client: redis.Redis, names: Names, ttl_s: float, token: str | None = None
    ) -> None:
        self.redis = client
        self.key = names.lease_key
        self.token = token or new_token()
        self.ttl_ms = max(1, round(ttl_s * 1000))
        self._take = lua.load(client, "lease_take")
        self._renew = lua.load(client, "lease_renew")
        self._release = lua.load(client, "lease_release")

    def take(self) -> bool:
        """Take the lease if nobody holds it; whether this token holds it now."""
        return bool(self._take(keys=[self.key], args=[self.token, self.ttl_ms]))

    def renew(self) -> bool:
        """Start the TTL again; False when the lease is no longer this token's (lost)."""
        return bool(self._renew(keys=[self.key], args=[self.token, self.ttl_ms]))

    def release(self) -> bool:
        """Let it go (a clean stop), if still held; whether it was."""
        return bool(self._release(keys=[self.key], args=[self.token]))

    def holder(self) -> Holder | None:
        """Who holds it now; None: nobody."""
        return read_holder(self.redis, self.key)


def read_holder(client: redis.Redis, key: str) -> Holder | None:
    """The holder of the lease `key` (`Names.lease_key`); None when nobody holds it."""
    pipe = client.pipeline(transaction=False)
    pipe.get(key)
    pipe.pttl(key)
    token, ttl_ms = pipe.execute()
    if token is None:
        return None
    return Holder(token.decode(errors="replace"), max(0, int(ttl_ms)) / 1000)
