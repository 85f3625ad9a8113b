"""Readings held for assembly: the last value of each input per device key, in Redis.

A model with `[models.NAME.assembly]` takes one value (or a few) per message; ingest holds
the last value of each named input per device key here, so every ingest process sees the
readings every other one took, and forms a sample from them when a label arrives or on a
period (`streamlearn.ingest.assembly`).

Keys, in the model's hash tag (one slot, so a cluster works):

- `held:k:{device}`: a hash, field -> "time value" (time: the ingest host's clock when it
  was held, unix s); an input's field is its index, the target's `y`; `ld` the digest of
  the key's last label message (its topic and payload), `lid` the sample id it formed,
  `ls` when (a window model's step's seq), `ln` the labels counted;
- `held:index`: a sorted set, each device key by its newest reading's time; keys idle past
  `ttl_s` are dropped, and at most `max_devices` kept;
- `held:owners`, `held:senders`, `held:by:{sender}`: which sender (a digest of the topic)
  made each key, how many each holds, and each sender's keys by time, so a flood of new
  keys from one sender is refused past `max_keys_per_sender` (`too_many_keys`) and evicts
  only its own keys past `max_devices`, as the window store does (`store.windows`).

One Lua call (`lua/held_update.lua`) holds a run of readings and, for each that carries a
label, makes its sample's id: a label message whose digest equals its key's last one is a
redelivery and gets that id (and seq) back, so the stream's de-duplication drops its
sample if it was appended, and appends it if the first try failed before; another gets
`{device}|{n}|{digest[:12]}`, `n` counting the key's labels. So a label message identical
to its key's previous label on the same topic is taken as a redelivery.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

import redis

from streamlearn.contract.names import Names
from streamlearn.store import lua
from streamlearn.store.redis_client import evalsha
from streamlearn.store.windows import sender_id

CHUNK_READINGS = 1000  # readings per script call: a call blocks Redis while it runs
SCAN_KEYS = 500  # held keys read per round trip of a periodic formation
TARGET = "y"  # the target's field in a held hash


def label_digest(topic: str, payload: bytes) -> str:
    """What tells a label message again: 24 hex characters of a digest of its topic and
    payload.

    >>> label_digest("a/b", b"1")
    '21431f5c4b19b3eda30dbe5b'
    """
    h = hashlib.blake2b(digest_size=12, person=b"sl-held-label")
    h.update(topic.encode() + b"\x00" + payload)
    return h.hexdigest()


class Reading(NamedTuple):
    """What one message says of one device key: `values` by input index (NaN: missing),
    the target's JSON text (None: none), and the label's digest when it carries a label
    (`label_digest`). `sender` is the topic it came on (None: the shared samples topic,
    bound by `max_devices` alone). (A tuple: one a message, half a dataclass's cost.)"""

    key: str
    sender: str | None
    values: dict[int, float]
    target: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class Held:
    """A key's held state at a formation: each field's (time, value text)."""

    fields: dict[str, tuple[float, str]]

    def value(self, field: str, now: float, max_age_s: float) -> str | None:
        """The field's value text, None when absent or older than `max_age_s`."""
        held = self.fields.get(field)
        return held[1] if held is not None and now - held[0] <= max_age_s else None


@dataclass(frozen=True)
class Formed:
    """A sample a label formed: its reading's position in the run, its id and seq."""

    reading: int
    id: str
    seq: float
    held: Held


@dataclass(frozen=True)
class HeldUpdate:
    """What a run of readings did: the samples their labels formed, the readings refused
    (position, keys their sender holds), the keys evicted to keep `max_devices`."""

    formed: tuple[Formed, ...] = ()
    refused: tuple[tuple[int, int], ...] = ()
    evicted: int = 0


class HeldStore:
    """One model's held readings in Redis."""

    def __init__(self, client: redis.Redis, names: Names) -> None:
        self.redis = client
        self.names = names
        self.index = names.held_key("index")
        self.owners = names.held_key("owners")
        self.senders = names.held_key("senders")
        self.by_sender = names.held_key("by:")
        self.prefix = names.held_key("k:")
        self._update = lua.load(client, "held_update")

    def key(self, device: str) -> str:
        return self.prefix + device

    def update(
        self,
        readings: Sequence[Reading],
        now: float,
        ttl_s: int,
        max_devices: int,
        max_keys_per_sender: int,
    ) -> HeldUpdate:
        """Hold `readings` in order and make the ids of the samples their labels form;
        one round trip, one script call per `CHUNK_READINGS`. Safe to call again with the
        same readings after a failure: a label then gets the same id."""
        if not readings:
            return HeldUpdate()
        pipe = self.redis.pipeline(transaction=False)
        head = [repr(float(now)), ttl_s, max_devices, max_keys_per_sender]
        head += [self.prefix, self.by_sender]
        for start in range(0, len(readings), CHUNK_READINGS):
            self._queue(pipe, readings[start : start + CHUNK_READINGS], head)
        try:
            replies = pipe.execute()
        except redis.exceptions.NoScriptError:  # a restarted Redis lost it: load, go again
            self.redis.script_load(self._update.script)  # (what did run is idempotent)
            return self.update(readings, now, ttl_s, max_devices, max_keys_per_sender)
        formed: list[Formed] = []
        refused: list[tuple[int, int]] = []
        evicted = 0
        for c, (made, said, out) in enumerate(replies):
            start = c * CHUNK_READINGS
            for n, sid, seq, flat in made:
                formed.append(Formed(start + int(n) - 1, sid.decode(), float(seq), _held(flat)))
            for line in said:
                n, held = line.decode().split(" ")
                refused.append((start + int(n) - 1, int(held)))
            evicted += int(out)
        return HeldUpdate(tuple(formed), tuple(refused), evicted)

    def _queue(self, pipe: redis.client.Pipeline, readings: Sequence[Reading], head: list) -> None:
        slots = {k: i for i, k in enumerate(dict.fromkeys(r.key for r in readings), start=4)}
        lines = []
        for r in readings:
            fields = [f"{i} {v!r}" for i, v in r.values.items()]
            if r.target is not None:
                fields.append(f"{TARGET} {r.target}")
            sender = "-" if r.sender is None else sender_id(r.sender)
            lines.append("\t".join([str(slots[r.key]), r.key, sender, r.label or "-", *fields]))
        keys = [self.index, self.owners, self.senders, *(self.key(k) for k in slots)]
        evalsha(pipe, self._update.sha, keys, *head, *lines)

    def scan(self, now: float, ttl_s: int) -> Iterator[tuple[str, Held]]:
        """Every key held within `ttl_s` and its state, a page of `SCAN_KEYS` per round
        trip (for a periodic formation: read only)."""
        top, offset = now - ttl_s, 0
        while True:
            devices = cast(
                list[bytes], self.redis.zrangebyscore(self.index, top, "+inf", offset, SCAN_KEYS)
            )
            if not devices:
                return
            pipe = self.redis.pipeline(transaction=False)
            for d in devices:
                pipe.hgetall(self.key(d.decode()))
            for d, flat in zip(devices, pipe.execute(), strict=True):
                if flat:
                    yield d.decode(), _held([v for kv in flat.items() for v in kv])
            offset += len(devices)

    def size(self) -> int:
        """Keys held (the index's size)."""
        return int(self.redis.zcard(self.index))


def _held(flat: list[bytes]) -> Held:
    """A hash's inputs and target, flat as HGETALL gives them, as a `Held` (its label's
    fields left out: an id holds its key, which may hold spaces)."""
    fields: dict[str, tuple[float, str]] = {}
    for name, value in zip(flat[::2], flat[1::2], strict=True):
        field = name.decode()
        at, _, text = value.decode().partition(" ")
        if text and (field == TARGET or field.isdigit()):
            fields[field] = (float(at), text)
    return Held(fields)
