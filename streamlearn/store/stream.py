"""The sample stream: a Redis Stream per model, read by consumer groups, and its dead letters.

This module owns the stream: its entry format (here and in `lua/entry.lua`), its consumer
groups, its lua. An entry holds the samples of a run of accepted MQTT messages packed
as float32 arrays, appended exactly once (`streamlearn.store.appends`): a learner's cost is per
entry, so a run of single-sample messages is one entry, not hundreds. Entries are acknowledged by
the learner only after the step that trained on them, and the stream is trimmed only below
what every group has delivered and acknowledged (a model's second variants read the
same stream in groups of their own, `group_of`), except a variant's group that is stale or
too far behind (`SampleStream.trim`). What cannot be used goes to the capped dead-letter
stream `sl:{model}:deadletter`, under the policy the stream was made with.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from functools import cached_property
from typing import Any, cast

import numpy as np
import redis
from redis.typing import EncodableT

from streamlearn.config.app import BASE_VARIANT, ModelConfig
from streamlearn.contract.names import Names
from streamlearn.contract.records import Rejection, Samples
from streamlearn.store import lua
from streamlearn.store.appends import Appended, Appender
from streamlearn.store.entries import Entry, Packed, stream_id, unpack
from streamlearn.store.sent import Senders, Sent

GROUP = "learners"  # the base variant's group: the one ingest's back-pressure bounds

# What redis-py returns for this (never decoding) client: stream entries as (id, fields),
# the fields None once deleted; XREADGROUP's reply as (stream, entries) per stream.
_Rows = list[tuple[bytes, dict[bytes, bytes] | None]]
_Read = list[tuple[bytes, _Rows]]


def group_of(variant: str) -> str:
    """The consumer group a variant's learner reads the stream in.

    >>> group_of("base"), group_of("fast")
    ('learners', 'learners:fast')
    """
    return GROUP if variant == BASE_VARIANT else f"{GROUP}:{variant}"


class SampleStream:
    """Producer and consumer side of one model's sample stream, and its dead letters.

    `group` is the consumer group this side reads in (a second variant reads the same
    stream in its own, `group_of`). Dead letters keep the first `deadletter_payload_bytes`
    of each payload, and the dead-letter stream its newest `deadletter_maxlen` entries.
    """

    def __init__(
        self,
        client: redis.Redis,
        names: Names,
        sample_shape: tuple[int, ...],
        group: str = GROUP,
        *,
        deadletter_maxlen: int = 10_000,
        deadletter_payload_bytes: int = 1024,
    ) -> None:
        self.redis = client
        self.names = names
        self.key = names.samples_key
        self.sample_shape = sample_shape
        self.group = group
        self.deadletter_maxlen = deadletter_maxlen
        self.deadletter_payload_bytes = deadletter_payload_bytes
        self._senders = Senders(client)  # the learner's reads and acknowledgements

    @classmethod
    def of(
        cls, client: redis.Redis, names: Names, model: ModelConfig, group: str = GROUP
    ) -> SampleStream:
        """`model`'s stream: its sample shape, its dead-letter policy (`[ingest]`)."""
        return cls(
            client,
            names,
            model.sample_shape,
            group,
            deadletter_maxlen=model.ingest.deadletter_maxlen,
            deadletter_payload_bytes=model.ingest.deadletter_payload_bytes,
        )

    # -- producer (ingest) ---------------------------------------------------------------

    @cached_property
    def appender(self) -> Appender:
        return Appender(self.redis, self.names, self.sample_shape, GROUP)

    def write(
        self,
        accepted: Iterable[Samples],
        rejected: Iterable[tuple[str, Rejection]] = (),
        *,
        dedup_window_s: int = 0,
        max_dedup_ids: int = 1_000_000,
        backlog: bool = False,
        entry_each: bool = False,
        dedup_share: float = 1.0,
    ) -> Appended:
        """Append accepted samples and dead letters, `rejected` as (source, rejection), in
        one round trip: the samples of up to `appends.CHUNK_SAMPLES` in one entry, or an
        entry each message (`entry_each`).

        Samples whose `id` was appended within `dedup_window_s` seconds are dropped, in the
        same atomic step as the append (`streamlearn.store.appends`), a sender remembering at
        most `dedup_share` of the ids; `backlog` also measures the samples the learners have
        not acknowledged yet.
        """
        accepted = list(accepted)
        pipe = self.redis.pipeline(transaction=False)
        calls = len(
            self.stage(
                pipe,
                accepted,
                rejected,
                dedup_window_s,
                max_dedup_ids,
                backlog,
                entry_each,
                dedup_share=dedup_share,
            )
        )
        try:
            replies = pipe.execute()
        except redis.exceptions.NoScriptError:  # no script ran; the dead letters are in
            self.load_scripts()
            return self.write(
                accepted,
                dedup_window_s=dedup_window_s,
                max_dedup_ids=max_dedup_ids,
                backlog=backlog,
                entry_each=entry_each,
                dedup_share=dedup_share,
            )
        return Appended(
            added=sum(int(r[0]) for r in replies[:calls]),
            duplicates=sum(int(r[1]) for r in replies[:calls]),
            backlog=int(replies[-1]) if backlog else None,
            unremembered=sum(int(r[2]) for r in replies[:calls]),
        )

    def stage(
        self,
        pipe: redis.client.Pipeline,
        accepted: list[Samples],
        rejected: Iterable[tuple[str, Rejection]],
        dedup_window_s: int,
        max_dedup_ids: int,
        backlog: bool,
        entry_each: bool = False,
        *,
        dedup_share: float = 1.0,
    ) -> list[int]:
        """Queue a write on `pipe`: the appends, then one XADD per dead letter, then (when
        `backlog`) the backlog's measure. Returns how many messages of `accepted` each
        append call takes (`appends.per_call`): each call is applied whole or not at all, so
        a caller can tell from the replies which messages are in (`streamlearn.ingest.writes`)."""
        calls = self.appender.append(
            pipe, accepted, dedup_window_s, max_dedup_ids, entry_each, dedup_share
        )
        for source, rejection in rejected:
            self._deadletter(pipe, source, rejection)
        if backlog:
            self.appender.backlog(pipe)
        return calls

    def backlog(self) -> int:
        """Samples in the stream the base group (`GROUP`) has not acknowledged yet."""
        return int(self.appender.backlog())

    def load_scripts(self) -> None:
        """Load the append scripts into Redis again (after a restart emptied its cache)."""
        self.appender.load()

    def _deadletter(self, pipe: redis.client.Pipeline, source: str, rej: Rejection) -> None:
        fields: dict[EncodableT, EncodableT] = {
            "reason": rej.reason,
            "kind": rej.kind,
            "source": source,
            "payload": rej.payload[: self.deadletter_payload_bytes],
            "size": len(rej.payload),
            "at": f"{time.time():.3f}",
        }
        key = self.names.deadletter_key
        pipe.xadd(key, fields, maxlen=self.deadletter_maxlen, approximate=False)

    # -- consumer (learner) --------------------------------------------------------------

    def ensure_group(self) -> None:
        try:
            self.redis.xgroup_create(self.key, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read(self, consumer: str, count: int, block_ms: int | None) -> list[Entry]:
        """New entries for `consumer`; waits up to `block_ms` when none (None: don't wait)."""
        resp = cast(
            _Read | None,
            self.redis.xreadgroup(
                self.group, consumer, {self.key: ">"}, count=count, block=block_ms
            ),
        )
        return [self._entry(eid, f) for _, rows in resp or () for eid, f in rows if f]

    def read_packed(self, consumer: str, count: int, block_ms: int | None) -> Packed:
        """Like `read`, for the learner: up to `count` entries packed by a script in Redis
        (`lua/stream_read.lua`); when there are none, waits up to `block_ms` for the first."""
        packed = self.packed(self.send_read(consumer, count).result())
        if len(packed) or block_ms is None:
            return packed
        first = Packed.of(self.read(consumer, 1, block_ms), self.sample_shape)
        if not len(first) or count == 1:
            return first
        try:
            rest = self.packed(self.send_read(consumer, count - 1).result())
        except redis.RedisError:  # shows at the next read; what was read is not dropped
            return first
        return Packed(
            first.ids + rest.ids,
            np.concatenate([first.ends, rest.ends + (first.ends[-1] if len(first.ends) else 0)]),
            np.concatenate([first.x, rest.x]),
            np.concatenate([first.y, rest.y]),
            first.unusable + rest.unusable,
        )

    def send_read(self, consumer: str, count: int) -> Sent:
        """`read_packed(consumer, count, None)` sent now: `packed(result())` (`Sent`)."""
        args = [self.group, consumer, count, 4 * int(np.prod(self.sample_shape))]
        return Sent(self._senders, self._read_script, [self.key], args)

    def packed(self, got: list | None) -> Packed:
        """`lua/stream_read.lua`'s reply as arrays."""
        if not got:
            return Packed.empty(self.sample_shape)
        ids, same, x, y, bad, counts = got
        unusable = [(bad[i], bad[i + 1].decode()) for i in range(0, len(bad), 2)]
        if not ids:
            return Packed.empty(self.sample_shape, unusable)
        ids = ids.split(b",")
        per = np.full(len(ids), same) if same else np.frombuffer(counts, "<u4")
        x = np.frombuffer(x, np.float32).reshape((-1, *self.sample_shape))
        y = np.frombuffer(y, np.float32)
        return Packed(ids, np.cumsum(per, dtype=np.int64), x, y, unusable)

    @cached_property
    def _read_script(self) -> redis.commands.core.Script:
        return lua.load(self.redis, "stream_read")

    @cached_property
    def _ack_script(self) -> redis.commands.core.Script:
        return lua.load(self.redis, "stream_ack")

    def pending(self, consumer: str, count: int = 1000) -> list[Entry]:
        """All entries delivered to `consumer` but not acknowledged (to resume after a restart).

        Read `count` at a time; an entry deleted while pending comes back with an `error`.
        """
        entries: list[Entry] = []
        after: bytes | str = "0"
        while True:
            resp = cast(
                _Read | None,
                self.redis.xreadgroup(self.group, consumer, {self.key: after}, count=count),
            )
            rows = [row for _, rows in resp or () for row in rows]
            if not rows:
                return entries
            entries += [self._entry(eid, f) for eid, f in rows]
            after = rows[-1][0]

    def claim_stale(self, consumer: str, min_idle_ms: int, count: int = 1000) -> list[Entry]:
        """Take over every entry another (dead) consumer left pending for `min_idle_ms`.

        Never this consumer's own: those it holds until they are durable, however long
        that takes (a publish refused while Redis is full), and must not train twice.
        """
        entries: list[Entry] = []
        start: bytes | str = "-"
        while True:
            rows = cast(
                list[dict[str, Any]],
                self.redis.xpending_range(
                    self.key, self.group, start, "+", count, idle=min_idle_ms
                ),
            )
            theirs = [r["message_id"] for r in rows if r["consumer"].decode() != consumer]
            if theirs:
                claimed = cast(
                    _Rows, self.redis.xclaim(self.key, self.group, consumer, min_idle_ms, theirs)
                )
                entries += [self._entry(eid, f) for eid, f in claimed if f]
            if len(rows) < count:
                return entries
            start = b"(" + rows[-1]["message_id"]

    def ack(self, ids: list[bytes], chunk: int = 20_000) -> None:
        for start in range(0, len(ids), chunk):
            self.send_ack(ids[start : start + chunk]).result()

    def send_ack(self, ids: list[bytes]) -> Sent:
        """`ack(ids)` sent now, fewer ids than a chunk (`Sent`)."""
        return Sent(self._senders, self._ack_script, [self.key], [self.group, b",".join(ids)])

    def trim(
        self, stale_group_s: float | None = None, max_unread: int | None = None
    ) -> dict[str, str]:
        """Drop entries that every group still waited for has delivered and acknowledged.

        The base group (`learners`, whose backlog ingest's back-pressure bounds) is always
        waited for, even before its learner has made it (it will read from the start). A
        variant's group is not once every consumer in it has been idle for
        `stale_group_s` (a stopped or removed variant), nor while more than `max_unread`
        entries wait unread in it (a variant far behind): what only it still needs is
        then trimmed. Returns the groups not waited for, each with why.
        """
        groups = self.redis.xinfo_groups(self.key)
        based = any(group["name"].decode() == GROUP for group in groups)
        floors, passed = ([] if based else [(0, 0)]), {}
        for group in groups:
            name = group["name"].decode()
            why = None if name == GROUP else self._passed(group, stale_group_s, max_unread)
            if why is None:
                floors.append(self._floor(group))
            else:
                passed[name] = why
        if floors:
            floor = min(floors)
            self.redis.xtrim(self.key, minid=f"{floor[0]}-{floor[1]}", approximate=True)
        return passed

    def _passed(
        self, group: dict, stale_group_s: float | None, max_unread: int | None
    ) -> str | None:
        """Why trimming no longer waits for `group`, or None."""
        lag = group.get("lag")
        if max_unread is not None and lag is not None and lag > max_unread:
            return f"{lag} entries unread > max_stream_length={max_unread}"
        if stale_group_s is None or not group["consumers"]:
            return None  # a group without consumers yet: its learner is starting
        consumers = self.redis.xinfo_consumers(self.key, group["name"])
        idle_s = min(c["idle"] for c in consumers) / 1000 if consumers else 0.0
        if idle_s > stale_group_s:
            return f"its consumers idle for {idle_s:.0f} s > stale_group_s={stale_group_s:g}"
        return None

    def _floor(self, group: dict) -> tuple[int, int]:
        """The oldest entry `group` still needs: its oldest pending one, else the next."""
        summary = self.redis.xpending(self.key, group["name"])
        if summary["pending"]:
            return stream_id(summary["min"])
        ms, seq = stream_id(group["last-delivered-id"])
        return ms, seq + 1

    def length(self) -> int:
        return self.redis.xlen(self.key)

    def _entry(self, eid: bytes, fields: dict[bytes, bytes] | None) -> Entry:
        try:
            if not fields:
                raise ValueError("deleted from the stream while pending")
            return Entry(eid, unpack(fields, self.sample_shape))
        except (KeyError, ValueError) as exc:  # one bad entry must not stop the learner
            empty = Samples(np.empty((0, *self.sample_shape), np.float32), np.empty(0, np.float32))
            return Entry(eid, empty, error=f"unusable stream entry: {exc!r}")
