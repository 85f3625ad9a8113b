"""Sparkplug B payloads (Tahu's protobuf `Payload`) read into metrics, and the two
messages a host application publishes: a rebirth request and its STATE.

A metric's value becomes a float for the numeric types (signed integers by their width,
as Tahu encodes them in unsigned fields), 1.0 or 0.0 for a boolean, and a string for
String, Text and UUID (a categorical input's). A null metric (`is_null`) has the value
None: a missing input. DataSet, Template, Bytes, File, the arrays and unknown types are
skipped and counted; so are names past their bound or with control characters, strings
past theirs, and historical values (`is_historical`: a store-and-forward backlog, not what
holds now). Their aliases are kept apart (`Decoded.ignored`), so that a birth declares
them and their data asks for nothing.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from google.protobuf.message import DecodeError

from streamlearn.contract.sparkplug.proto import sparkplug_b_pb2 as pb
from streamlearn.errors import PayloadError

KIND = "bad_sparkplug"  # a dead letter's kind (`streamlearn.contract.records.DEAD_LETTERS`)
MAX_METRICS = 2048  # metrics in one payload (a birth's: aliases a node or device declares)
MAX_NAME_CHARS = 256  # a metric's name (a model's input is named at most so)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # no name holds them (nor a model's input)
MAX_STRING_CHARS = 256  # a string value (a categorical input's value is at most so)
SEQ_MODULUS = 256  # `seq` counts 0..255 per edge node, then 0 again
BD_SEQ = "bdSeq"  # the birth/death sequence metric of NBIRTH and NDEATH
REBIRTH = "Node Control/Rebirth"  # the boolean NCMD metric that asks a node for its births

# Tahu's DataType numbers (sparkplug_b.proto): signed integers (and their width in bits),
# the other numbers, the boolean and the strings. Any other type is not read.
SIGNED = {1: 8, 2: 16, 3: 32, 4: 64}
NUMERIC = {5, 6, 7, 8, 9, 10, 13}  # UInt8..UInt64, Float, Double, DateTime (ms)
BOOLEAN = 11
STRINGS = {12, 14, 15}  # String, Text, UUID
READ = {*SIGNED, *NUMERIC, BOOLEAN, *STRINGS}
# The protobuf fields of the values read without a question (`_skip`'s): data by alias
PLAIN = {"int_value", "long_value", "float_value", "double_value", "boolean_value"}

Value = bool | float | str | None
Raw = int | float | bool | str | None


class Metric(NamedTuple):
    """One metric as sent: a birth names it (and gives its alias), data may give only the
    alias. `datatype` is None when the message leaves it out (data usually does: the
    birth's is then its type, `value_of`); `raw` is the protobuf value as sent. (A tuple:
    made for every metric of every message, it costs half a frozen dataclass.)"""

    name: str | None
    alias: int | None
    timestamp_ms: int | None
    datatype: int | None
    raw: Raw

    @property
    def value(self) -> Value:
        """Its value by its own type (`value_of`), read when asked: data by alias is read
        by its birth's type instead."""
        return value_of(self.raw, self.datatype)


@dataclass(frozen=True)
class Decoded:
    """One payload: its timestamp (ms) and seq (None where absent: NDEATH has none), the
    metrics read, their bdSeq when a metric carries one, the aliases of metrics skipped
    (`ignored`), and how many were skipped by reason."""

    timestamp_ms: int | None
    seq: int | None
    metrics: tuple[Metric, ...]
    bd_seq: int | None = None
    ignored: tuple[int, ...] = ()
    skipped: dict[str, int] = field(default_factory=dict)


def value_of(raw: Raw, datatype: int | None) -> Value:
    """A metric's value by its type: signed integers read from their two's complement,
    non-finite floats as None (missing), a boolean as itself (an input reads it 1 or 0, a
    categorical one "true" or "false", as in JSON). Without a type, by what was sent.

    >>> value_of(255, 1), value_of(255, 5), value_of(True, 11), value_of(2**64 - 2, 4)
    (-1.0, 255.0, True, -2.0)
    """
    if raw is None or isinstance(raw, str | bool):
        return raw
    if isinstance(raw, int) and datatype in SIGNED:
        bits = SIGNED[datatype]
        raw &= (1 << bits) - 1
        return float(raw - (1 << bits) if raw >> (bits - 1) else raw)
    value = float(raw)
    return value if math.isfinite(value) else None


def decode(payload: bytes) -> Decoded:
    """The metrics of a Sparkplug B payload; PayloadError (`KIND`) when it is not one,
    has more than `MAX_METRICS` metrics or a seq past 255."""
    message = pb.Payload()
    try:
        message.ParseFromString(payload)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise PayloadError(f"not a Sparkplug B payload (protobuf: {e})", KIND) from None
    if not (message.HasField("timestamp") or message.HasField("seq") or message.metrics):
        raise PayloadError("not a Sparkplug B payload: no timestamp, seq or metrics", KIND)
    if len(message.metrics) > MAX_METRICS:
        raise PayloadError(f"{len(message.metrics)} metrics, more than {MAX_METRICS}", KIND)
    seq = message.seq if message.HasField("seq") else None
    if seq is not None and seq >= SEQ_MODULUS:
        raise PayloadError(f"seq {seq} is past 255", KIND)
    metrics: list[Metric] = []
    ignored: list[int] = []
    skipped: dict[str, int] = {}
    bd_seq = None
    for m in message.metrics:
        has = m.HasField
        alias = m.alias if has("alias") else None
        name = m.name if has("name") else None
        datatype = m.datatype if has("datatype") else None
        kind = m.WhichOneof("value")
        plain = kind in PLAIN and (datatype is None or datatype in READ)
        if plain and name is None and alias is not None and not m.is_historical:
            ts = m.timestamp if has("timestamp") else None  # data by alias: most metrics
            metrics.append(
                Metric(None, alias, ts, datatype, None if m.is_null else getattr(m, kind))
            )
            continue
        why = _skip(m, name, alias, datatype, kind)
        if why is not None:
            skipped[why] = skipped.get(why, 0) + 1
            if alias is not None:
                ignored.append(alias)
            continue
        raw: Raw = None if m.is_null or kind is None else getattr(m, kind)
        if name == BD_SEQ and isinstance(raw, int):
            bd_seq = raw
        ts = m.timestamp if m.HasField("timestamp") else None
        metrics.append(Metric(name, alias, ts, datatype, raw))
    timestamp = message.timestamp if message.HasField("timestamp") else None
    return Decoded(timestamp, seq, tuple(metrics), bd_seq, tuple(ignored), skipped)


def _skip(
    m: pb.Payload.Metric,
    name: str | None,
    alias: int | None,
    datatype: int | None,
    kind: str | None,
) -> str | None:
    """Why a metric is not read (None: it is)."""
    if name is None and alias is None:
        return "unnamed"
    if name is not None and (len(name) > MAX_NAME_CHARS or _CONTROL.search(name)):
        return "bad_name"
    if datatype is not None and datatype not in READ:
        return "unsupported"
    if kind in ("bytes_value", "dataset_value", "template_value", "extension_value"):
        return "unsupported"
    if m.is_historical:  # store-and-forward's backlog: not the value now
        return "historical"
    if kind == "string_value" and len(m.string_value) > MAX_STRING_CHARS:
        return "long_string"
    return None


def rebirth_request(timestamp_ms: int) -> bytes:
    """The NCMD payload that asks an edge node for its births again (publish it on
    `topic_of("NCMD", group, node)`): the boolean `Node Control/Rebirth`, true."""
    message = pb.Payload(timestamp=timestamp_ms)
    message.metrics.add(name=REBIRTH, timestamp=timestamp_ms, datatype=BOOLEAN, boolean_value=True)
    return message.SerializeToString()


def state_payload(online: bool, timestamp_ms: int) -> bytes:
    """A host application's STATE (Sparkplug 3.0), retained on `state_topic(host)`: the
    online message and the MQTT will (`online: false`) of one connection carry the same
    timestamp, set before it connects, so an edge node can tell a stale will.

    >>> state_payload(True, 1700000000000)
    b'{"online":true,"timestamp":1700000000000}'
    """
    return json.dumps({"online": online, "timestamp": timestamp_ms}, separators=(",", ":")).encode()
