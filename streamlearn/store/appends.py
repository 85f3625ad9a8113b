"""Exactly-once appends to a samples stream, and the backlog its learners have not done:
the internals of `streamlearn.store.stream`, which alone uses them.

A redelivered MQTT message must not add its samples twice, and a crash must never leave
an id marked as seen without its samples in the stream. So a run of messages is checked
against the ids seen recently, appended (one entry per call) and its new ids recorded,
all in one Lua script call (`lua/stream_append.lua`): Redis runs it atomically, and it
reaches the AOF and replicas as one transaction. Every key it touches is passed in KEYS
and carries the model's hash tag (`sl:{model}:...`), so it also runs on a Redis Cluster.
The script reads and checks every key before it writes any: a call that fails (a key of
the wrong type) wrote nothing, so the caller may dead-letter its messages or run them
again.

Seen ids live in two sets, the current and the previous generation, bounded in time and
in size: a new generation starts (the previous one is UNLINKed, freed in the background)
once the current one is `window` seconds old (the ingest hosts' clocks) or holds half of
`max_ids`. An id is so remembered for at least `window`, or for as long as it takes
`max_ids / 2` new ids to arrive when that is sooner, and Redis holds at most about
`max_ids` of them (plus one run) whatever the rate.

A sender (`samples/{client}`, `labels/{client}`: the namespace of its ids,
`names.id_sender`) remembers at most its `share` of a generation's `max_ids / 2`; its
further ids of that generation are appended and not remembered (counted), so one device's
flood of new ids turns no generation over and forgets nobody else's. Bare `samples`, and
labels of predictions asked anonymously, share the whole of it.

Each entry also records `c`, the running total of samples appended (kept in
`sl:{model}:ingest:count`), so the unprocessed samples are `count - c + n` of the oldest
entry the learners' group has not acknowledged: one cheap script call, whatever the backlog
(`lua/stream_backlog.lua`).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import overload

import numpy as np
import redis

from streamlearn.contract.names import Names, id_sender
from streamlearn.contract.records import Samples
from streamlearn.store import lua
from streamlearn.store.redis_client import evalsha

# Samples per script call, and so per stream entry: a call blocks Redis while it runs, so
# keep each to a few ms. A message is never split, so a call holds up to
# max_samples_per_message.
CHUNK_SAMPLES = 2000


def per_call(accepted: Sequence[Samples], entry_each: bool = False) -> list[int]:
    """How many messages of `accepted`, in order, each script call of `Appender.append`
    takes: up to `CHUNK_SAMPLES` samples, a message never split (`entry_each`: one each).
    Each call is atomic, so a caller can tell from a pipeline's replies which messages are
    in (`streamlearn.ingest.loop`).

    >>> per_call([Samples(np.zeros((n, 1)), np.zeros(n)) for n in (1500, 400, 300, 5000)])
    [2, 1, 1]
    """
    if entry_each:
        return [1] * len(accepted)
    counts: list[int] = []
    size = 0
    for samples in accepted:
        if counts and size + len(samples) <= CHUNK_SAMPLES:
            counts[-1] += 1
            size += len(samples)
        else:
            counts.append(1)
            size = len(samples)
    return counts


_quote = json.encoder.encode_basestring_ascii


@dataclass(frozen=True)
class Appended:
    """What one write did: samples added, samples dropped as already seen, and the backlog
    (unacknowledged samples) right after, when it was asked for."""

    added: int = 0
    duplicates: int = 0
    backlog: int | None = None
    unremembered: int = 0  # ids appended past their sender's share: not de-duplicated


class Appender:
    """Queues exactly-once appends and backlog checks on a pipeline (one round trip);
    the backlog is that of consumer group `group`."""

    def __init__(
        self,
        client: redis.Redis,
        names: Names,
        sample_shape: tuple[int, ...],
        group: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.names = names
        self.stream = names.samples_key
        self.counter = names.ingest_count_key
        self.group = group
        self.row_bytes = 4 * int(np.prod(sample_shape))
        self.clock = clock
        self._append = lua.load(client, "stream_append")
        self._backlog = lua.load(client, "stream_backlog")

    def append(
        self,
        pipe: redis.client.Pipeline,
        accepted: Iterable[Samples],
        window_s: int,
        max_ids: int = 1_000_000,
        entry_each: bool = False,
        share: float = 1.0,
    ) -> list[int]:
        """Queue the appends of `accepted`; returns how many messages each script call
        queued takes (`per_call`). A call's samples make one stream entry: a learner's cost
        is per entry, whatever its size. `entry_each`: an entry per message (a stream laid
        out as a test or a bench needs it).

        Samples whose id was appended within the last `window_s` seconds (up to twice
        that) are dropped, of the last `max_ids` ids at least; 0 turns de-duplication off.
        A sender remembers at most `share` of a generation's ids.
        """
        keys = [self.stream, self.counter]
        if window_s:
            leaves = ("0", "1", "gen", "by")
            keys += [self.names.stream_key(f"ingest:seen:{leaf}") for leaf in leaves]
        head = [window_s, repr(float(self.clock())), max_ids, self.row_bytes]
        room = max(1, int(share * max_ids / 2))
        accepted = list(accepted)
        calls, at = per_call(accepted, entry_each), 0
        for n in calls:
            run = accepted[at : at + n]
            evalsha(pipe, self._append.sha, keys, *head, *self._args(run, window_s), room)
            at += n
        return calls

    @overload
    def backlog(self, pipe: None = None) -> int: ...
    @overload
    def backlog(self, pipe: redis.client.Pipeline) -> None: ...
    def backlog(self, pipe: redis.client.Pipeline | None = None) -> int | None:
        """Samples in the stream the learners have not acknowledged (queued when `pipe`)."""
        if pipe is not None:
            evalsha(pipe, self._backlog.sha, [self.stream, self.counter], self.group)
            return None
        return int(self._backlog(keys=[self.stream, self.counter], args=[self.group]))

    def load(self) -> None:
        """Load the scripts into Redis (after a restart emptied its script cache).

        Pipelines send EVALSHA alone: checking for the scripts first would cost a round
        trip per write.
        """
        for script in (self._append, self._backlog):
            script.registered_client.script_load(script.script)

    def _args(self, run: list[Samples], window_s: int) -> list[bytes | str | int]:
        layout, fields, frags, senders = [], [], [], []
        for samples in run:
            if samples.ids is None:
                layout.append(str(len(samples)))
                continue
            mine = ["null" if i is None else _quote(i) for i in samples.ids]
            fields.append(f"[{','.join(mine)}]")
            layout.append(f"{len(samples)}:{len(fields[-1])}")
            if window_s:  # a message's ids are all in its sender's namespace
                frags += mine
                first = next((i for i in samples.ids if i is not None), None)
                senders.append((None if first is None else id_sender(first), len(mine)))
        by_sender = itertools.groupby(senders, itemgetter(0))
        runs = [(who, sum(n for _, n in run)) for who, run in by_sender]
        return [
            ",".join(layout),
            np.concatenate([s.x for s in run]).astype(np.float32, copy=False).tobytes(),
            np.concatenate([s.y for s in run]).astype(np.float32, copy=False).tobytes(),
            "".join(fields),
            "\n".join(frags),
            "".join(f"{n} {'-' if who is None else _quote(who)}\n" for who, n in runs)
            if any(who is not None for who, _ in runs)
            else "",
        ]
