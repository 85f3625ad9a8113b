"""Sparkplug B edge nodes' sessions, shared in Redis by every ingest process of a model.

A shared subscription hands one node's births and data to different ingest processes, in
no set order. So what a message means is decided in Redis, one Lua call per message
(`lua/sparkplug_message.lua`): a birth records its node's or device's aliases (alias ->
datatype and name) and restarts its seq; data resolves its aliases; a seq skipped and
still missing after `reorder_timeout_s`, data before its birth or an unknown alias asks
for a rebirth, at most once per node per `rebirth_min_interval_s` whatever the process;
an NDEATH of the birth's bdSeq (not an earlier session's will) kills the node and its
devices, a DDEATH its device.

Keys, in the model's hash tag (`Names.sparkplug_key`), `{n}` a node key `{group}/{node}`:
`sp:index` (node -> last message time), `sp:unborn` (nodes never born), `sp:n:{n}` (its
session: born, bdSeq, newest seq, seqs skipped, last rebirth asked, aliases held, last
renewal in the index),
`sp:s:{n}` (seq -> time seen), `sp:d:{n}` (device -> birth time, 0 dead), `sp:a:{n}` and
`sp:a:{n}/{device}` (alias tables). Bounds: `SparkplugConfig`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import redis

from streamlearn.config.sparkplug import SparkplugConfig
from streamlearn.contract.names import Names
from streamlearn.contract.sparkplug.payloads import (
    BD_SEQ,
    Decoded,
    Value,
    rebirth_request,
    value_of,
)
from streamlearn.contract.sparkplug.topics import HOST_TYPES, Topic, topic_of
from streamlearn.store import lua
from streamlearn.store.redis_client import evalsha

CONTROL = "Node Control/"  # a node's own controls (Rebirth, Reboot...): not readings
CHUNK_ARGS = 10_000  # fields of one script call, about (a birth's may take it past)
US = "\x1f"  # separates a message's fields and a reply's parts (`lua/sparkplug_message.lua`)
MAX_NAMES = 4096  # metric names whose `_reads` is remembered (of <= 256 chars: ~1 MB)
IGNORED = "-"  # the datatype of an alias of a metric skipped at its birth (a DataSet...)


@dataclass(frozen=True)
class Rebirth:
    """The NCMD that asks an edge node for its births again: publish it (QoS 0 or 1)."""

    topic: str
    payload: bytes


class Handled(NamedTuple):
    """What one message said of its device key (`{group}/{node}[/{device}]`).

    `values`: the readings it carried by metric name (None: null, a missing input); a
    birth carries every metric, data only those that changed (the others are unchanged).
    `times`: each reading's time, unix s (the metric's timestamp, else the payload's, else
    the call's clock). `status`: `ok`, `birth`, `death`, `command` (nothing done),
    `unborn` (data before its birth: its aliases unresolved), `unknown_alias`, `gap`,
    `stale_death`, `too_many_devices`, `too_many_aliases`. `dead`: the device keys that
    died. `late`: its seq is not the newest seen (a redelivery, or overtaken): its values
    may be older than those held. `unknown`: metrics whose alias no birth declared. (A
    tuple: one a message.)
    """

    key: str
    status: str
    values: Mapping[str, Value] = MappingProxyType({})
    times: Mapping[str, float] = MappingProxyType({})
    rebirth: Rebirth | None = None
    dead: tuple[str, ...] = ()
    late: bool = False
    unknown: int = 0


class SparkplugNodes:
    """One model's Sparkplug B edge nodes in Redis. `wanted`: the metric names the model
    reads (inputs and target; None: every one); the others' aliases are kept without
    their names, and their values are not returned."""

    def __init__(
        self,
        client: redis.Redis,
        names: Names,
        config: SparkplugConfig | None = None,
        wanted: Collection[str] | None = None,
    ) -> None:
        self.redis = client
        self.names = names
        self.config = config or SparkplugConfig()
        self.wanted = None if wanted is None else frozenset(wanted)
        self._read: dict[str | None, bool] = {}  # `_reads`, by name (at most MAX_NAMES)
        self.prefix = names.sparkplug_key("")
        self._script = lua.load(client, "sparkplug_message")
        c = self.config  # the script's arguments that do not change, encoded once
        self._head = [
            str(v).encode()
            for v in (c.ttl_s, c.max_nodes, c.max_devices_per_node, c.max_aliases_per_node)
            + (c.rebirth_min_interval_s, c.reorder_timeout_s, self.prefix)
        ]

    def handle(self, topic: Topic, decoded: Decoded, now: float) -> Handled:
        """What one message does to its node's state, and what it says (`Handled`)."""
        return self.handle_many([(topic, decoded)], now)[0]

    def handle_many(self, messages: Sequence[tuple[Topic, Decoded]], now: float) -> list[Handled]:
        """`handle` for several messages, in order, in one round trip: one script call
        per `CHUNK_ARGS` fields (a call blocks Redis while it runs), each message one
        argument (redis-py encodes each argument in Python: 9 a message cost more than the
        script's split of one)."""
        pipe = self.redis.pipeline(transaction=False)
        asked: list[list[int] | None] = []
        lines: list[str] = []
        fields = 0
        for topic, decoded in messages:
            line, aliases = self._line(topic, decoded)
            asked.append(aliases)
            if line is not None:
                lines.append(line)
                fields += line.count(US) + 1
            if fields >= CHUNK_ARGS:
                self._queue(pipe, lines, now)
                lines, fields = [], 0
        if lines:
            self._queue(pipe, lines, now)
        try:
            replies = iter([r for chunk in pipe.execute() for r in chunk])
        except redis.exceptions.NoScriptError:  # a restarted Redis lost it: nothing ran
            self.redis.script_load(self._script.script)
            return self.handle_many(messages, now)
        out = []
        for (topic, decoded), aliases in zip(messages, asked, strict=True):
            if aliases is None:
                out.append(Handled(topic.key, "command"))
            else:
                out.append(self._handled(topic, decoded, aliases, next(replies), now))
        return out

    def _queue(self, pipe: redis.client.Pipeline, lines: list[str], now: float) -> None:
        keys = [self.prefix + "index", self.prefix + "unborn"]
        evalsha(pipe, self._script.sha, keys, repr(float(now)), *self._head, *lines)

    def _line(self, topic: Topic, decoded: Decoded) -> tuple[str | None, list[int] | None]:
        """The message's argument of the script, its fields joined by `US` (no id or name
        holds a control character: `topics`, `payloads`), and the aliases it asks to
        resolve; (None, None) for a command or a STATE, which changes nothing."""
        if topic.type in HOST_TYPES:
            return None, None
        head = [topic.type, topic.node_key, topic.device or ""]
        head += ["" if decoded.seq is None else str(decoded.seq)]
        head += ["" if decoded.bd_seq is None else str(decoded.bd_seq)]
        items: list[str | int] = []
        aliases: list[int] = []
        if topic.type in ("NBIRTH", "DBIRTH"):
            for m in decoded.metrics:
                if m.alias is not None:
                    name = m.name if self._reads(m.name) else ""
                    items += [m.alias, f"{'' if m.datatype is None else m.datatype} {name}"]
            for alias in decoded.ignored:
                items += [alias, f"{IGNORED} "]
        elif topic.type in ("NDATA", "DDATA"):
            unnamed = (m.alias for m in decoded.metrics if m.name is None)
            aliases = list(dict.fromkeys(a for a in unnamed if a is not None))
            items += aliases
        return US.join([*head, *map(str, items)]), aliases

    def _reads(self, name: str | None) -> bool:
        """Is `name` a reading the model takes (not a control, nor bdSeq)? Remembered for
        `MAX_NAMES` names: asked for every metric of every message."""
        known = self._read.get(name)
        if known is not None:
            return known
        reads = not (name is None or name == BD_SEQ or name.startswith(CONTROL))
        reads = reads and (self.wanted is None or name in self.wanted)
        if len(self._read) >= MAX_NAMES:
            self._read.clear()
        self._read[name] = reads
        return reads

    def _handled(
        self, topic: Topic, decoded: Decoded, aliases: list[int], reply: bytes, now: float
    ) -> Handled:
        status, rebirth, late, n, *rest = reply.decode().split(US)
        dead, resolved = rest[: int(n)], rest[int(n) :]
        table = {a: r.split(" ", 1) for a, r in zip(aliases, resolved, strict=False) if r}
        values: dict[str, Value] = {}
        times: dict[str, float] = {}
        unknown = 0
        kept = status not in ("too_many_devices", "too_many_aliases")  # else not its own
        reads, sent_at = self._reads, decoded.timestamp_ms
        for name, alias, at, datatype, raw in decoded.metrics if kept else ():
            by_birth = datatype
            if name is None and alias is not None:
                dt, name = table.get(alias, (IGNORED, None))
                if alias not in table and alias not in decoded.ignored:
                    unknown += 1
                if datatype is None and dt not in ("", IGNORED):
                    by_birth = int(dt)  # read by its birth's type
            if reads(name):
                assert name is not None
                values[name] = value_of(raw, by_birth)
                at = sent_at if at is None else at
                times[name] = now if at is None else at / 1000
        if status == "ok" and topic.type in ("NBIRTH", "DBIRTH"):
            status = "birth"
        elif status == "ok" and dead:
            status = "death"
        ask = None
        if rebirth == "1":
            ask = Rebirth(
                topic_of("NCMD", topic.group, topic.node), rebirth_request(int(now * 1000))
            )
        return Handled(
            topic.key,
            status,
            values,
            times,
            ask,
            tuple(dead),
            late == "1",
            unknown,
        )
