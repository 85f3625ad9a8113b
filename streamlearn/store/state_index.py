"""Which device states are retained (contract §2.9), bounded across every actor.

Each actor predicts the readings the broker's shared subscription hands it, so any actor
may publish any key's state. Their bound is one: `Names.states_key`, a sorted set of the
keys with a retained state by their last state's time, holds at most `max_devices`. An
actor indexes what it published (and, at its start, the states retained before it) in one
script call a serving turn (`lua/states_touch.lua`), which says which keys are new to the
index (their discovery configs go out) and takes out the oldest past the bound (that actor
clears their states and configs). So the broker retains at most `max_devices` states a
model, however many actors publish them.

Actors publish over connections of their own, so a clear may reach the broker before a
config another actor sent for the same key: once the broker has acknowledged what it sent
for a key new to the index, the actor asks again (`checks`, in its next call), and clears
the key itself if another actor took it out meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import redis

from streamlearn.contract.names import Names
from streamlearn.store import lua


class Touched(NamedTuple):
    """What indexing did: the keys new to the index, those taken out past the bound, and
    the keys checked that the index no longer holds."""

    new: list[str]
    gone: list[str]
    absent: list[str]


class StateIndex:
    """One model's index of retained device states, at most `max_devices` keys."""

    def __init__(self, client: redis.Redis, names: Names, max_devices: int) -> None:
        self.key = names.states_key
        self.max_devices = max_devices
        self._touch = lua.load(client, "states_touch")

    def touch(self, stamped: Sequence[tuple[str, float]], checks: Sequence[str] = ()) -> Touched:
        """Index each `(key, time)`, a key's newest time kept: the keys new to the index,
        those taken out past the bound (oldest first), whose states the caller clears, and
        those of `checks` (looked up first) the index does not hold. Raises
        `redis.RedisError`."""
        if not stamped and not checks:
            return Touched([], [], [])
        args: list[str | float] = [self.max_devices, len(checks), *checks]
        for key, at in stamped:
            args += [at, key]
        found = self._touch(keys=[self.key], args=args)
        return Touched(*([k.decode(errors="replace") for k in keys] for keys in found))
