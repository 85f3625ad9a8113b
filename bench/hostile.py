"""The soak's hostile inputs: what a broken or malicious device sends, and what must follow.

Each `Kind` builds one message from a marker (`hostile-000123`). A samples message must
be dead-lettered with a reason: the marker sits in the first bytes of the payload (or of
each list item), which the dead letter keeps, so each message is matched to its dead
letters; the few payloads that cannot hold one (`[[[[...`, empty) are matched by their
bytes. A prediction request must get an error reply on a topic of the requester's own
reply space (`streamlearn.actor.replies`), matched by its MQTT v5 Correlation Data; a reply
anywhere else is a leak. A Response Topic with a control character never reaches the
service: Mosquitto disconnects the publisher, which is what is checked for it.

Two kinds are not refused whole: the valid items of a mixed list join the soak's ledger
(learned exactly once), and 1,000 new device keys per message are accepted, so that over
a run more devices come than `ingest.max_devices` keeps.

Run as `python -m bench.hostile`, it measures what such requests cost the actor against
a valid one (`bench._hostile_cost`).
"""

from __future__ import annotations

import json
import re
import struct
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from bench.loadgen import _vbi
from streamlearn.contract.names import Names

MARKER = re.compile(rb"hostile-(\d{6})")


def marker(n: int) -> str:
    return f"hostile-{n:06d}"


def publish_packet(
    topic: str,
    payload: bytes,
    *,
    qos: int = 0,
    packet_id: int = 1,
    response_topic: str | None = None,
    correlation: bytes | None = None,
    expiry_s: int | None = None,
) -> bytes:
    """An MQTT v5 PUBLISH with any Response Topic and Correlation Data (bytes as given),
    and a Message Expiry Interval when `expiry_s` is given."""
    props = b"" if expiry_s is None else b"\x02" + struct.pack("!I", expiry_s)
    if response_topic is not None:
        props += b"\x08" + _str(response_topic.encode("utf-8", "surrogatepass"))
    if correlation is not None:
        props += b"\x09" + _str(correlation)
    body = _str(topic.encode())
    if qos:
        body += struct.pack("!H", packet_id)
    rest = body + _vbi(len(props)) + props + payload
    return bytes([0x30 | qos << 1]) + _vbi(len(rest)) + rest


def _str(b: bytes) -> bytes:
    return struct.pack("!H", len(b)) + b


@dataclass(frozen=True)
class Shape:
    """The model's sample shape, for payloads that are valid but for one thing."""

    window: int
    inputs: int

    def x(self, value: object = 0.5) -> list:
        return [[value] * self.inputs for _ in range(self.window)]


@dataclass(frozen=True)
class Probe:
    """One hostile message as sent: topic leaf, payload, and for requests the reply setup."""

    payload: bytes
    response: str | None = None  # "own", "none", or a topic leaf under the model ("actors/x")
    bare: bool = False  # request on the bare `predict` topic instead of `predict/{client}`
    valid_ids: tuple[str, ...] = ()  # samples in it that are valid: learned exactly once


@dataclass(frozen=True)
class Kind:
    name: str
    topic: str  # "samples" or "predict"
    make: Callable[[str, Shape], Probe]
    marked: bool = True  # the marker is in the dead letter's payload
    expect: str = "refused"  # "refused" (dead letter / error reply), "broker", "accepted"


def _j(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _nested(mark: str, depth: int) -> bytes:
    return b'{"id": "%s", "x": ' % mark.encode() + b"[" * depth + b"]" * depth + b', "y": 0}'


def _oversize(mark: str, _s: Shape) -> Probe:
    return Probe(b'{"id": "%s", "x": [' % mark.encode() + b"0.0, " * 300_000 + b'0.0], "y": 0}')


def _unknown_keys(mark: str, s: Shape) -> Probe:
    extra = ",".join(f'"{i:x}":0' for i in range(90_000))  # under max_payload_bytes
    return Probe(b'{"id":"%s","x":%s,"y":0,%s}' % (mark.encode(), _j(s.x()), extra.encode()))


def _too_many(mark: str, s: Shape) -> Probe:
    n = 10_001
    ids = [mark] + [f"{mark}-{i}" for i in range(1, n)]
    return Probe(_j({"ids": ids, "x": [s.x(0)] * n, "y": [0.0] * n}))


def _invalid_list(mark: str, s: Shape) -> Probe:
    item = {"id": mark, "x": [1], "y": 0}
    return Probe(_j({"samples": [item] * 10_000}))


def _distinct_keys(mark: str, s: Shape) -> Probe:
    # max_keys_per_message; over the run, more keys than max_devices keeps
    items = [{"key": f"{mark}-{i}", "seq": 1, "x": [0.5] * s.inputs} for i in range(1000)]
    return Probe(_j({"samples": items}))


def _mixed(mark: str, s: Shape) -> Probe:
    ids = tuple(f"{mark}-ok{i}" for i in range(5))
    good = [{"id": i, "x": s.x(0.1 * k), "y": 0.1 * k} for k, i in enumerate(ids)]
    bad = [{"id": mark, "x": s.x("a"), "y": 0}] * 5
    return Probe(_j({"samples": good + bad}), valid_ids=ids)


SAMPLE_KINDS: list[Kind] = [
    Kind("deep brackets [*100000", "samples", lambda m, s: Probe(b"[" * 100_000), marked=False),
    Kind("empty payload", "samples", lambda m, s: Probe(b""), marked=False),
    Kind("invalid UTF-8", "samples", lambda m, s: Probe(b'\xff\xfe{"id": "%s"}' % m.encode())),
    Kind("bad JSON", "samples", lambda m, s: Probe(b'{"id": "%s", "x": [1, 2' % m.encode())),
    Kind("NaN in x", "samples", lambda m, s: Probe(_j({"id": m, "x": s.x(float("nan")), "y": 0}))),
    Kind("Infinity y", "samples", lambda m, s: Probe(_j({"id": m, "x": s.x(), "y": float("inf")}))),
    Kind("1e39 in x", "samples", lambda m, s: Probe(_j({"id": m, "x": s.x(1e39), "y": 0}))),
    Kind("wrong length", "samples", lambda m, s: Probe(_j({"id": m, "x": [[1, 2, 3]], "y": 0}))),
    Kind("strings in x", "samples", lambda m, s: Probe(_j({"id": m, "x": s.x("a"), "y": 0}))),
    Kind("string y", "samples", lambda m, s: Probe(_j({"id": m, "x": s.x(), "y": "1"}))),
    Kind("missing y", "samples", lambda m, s: Probe(_j({"id": m, "x": s.x()}))),
    Kind("unknown field", "samples", lambda m, s: Probe(_j({"id": m, "x": s.x(), "y": 0, "z": 1}))),
    Kind(
        "id of 300 chars",
        "samples",
        lambda m, s: Probe(_j({"id": m + "x" * 290, "x": s.x(), "y": 0})),
    ),
    Kind("top-level list", "samples", lambda m, s: Probe(_j([{"id": m, "x": s.x(), "y": 0}]))),
    Kind(
        "columnar lengths differ",
        "samples",
        lambda m, s: Probe(_j({"ids": [m, m + "b"], "x": [s.x()] * 2, "y": [0.0]})),
    ),
    Kind("oversize 1.5 MB", "samples", _oversize),
    Kind("nesting 50000 deep", "samples", lambda m, s: Probe(_nested(m, 50_000))),
    Kind("10,001 samples", "samples", _too_many),
    Kind("90,000 unknown keys", "samples", _unknown_keys),
    Kind("list of 10,000 invalid items", "samples", _invalid_list),
    Kind(
        "key with control chars",
        "samples",
        lambda m, s: Probe(_j({"key": m + "\x01", "seq": 1, "x": [0.5] * s.inputs})),
    ),
    Kind(
        "NaN seq",
        "samples",
        lambda m, s: Probe(_j({"key": m, "seq": float("nan"), "x": [0.5] * s.inputs})),
    ),
    Kind("5 valid + 5 invalid items", "samples", _mixed),
    Kind("1,000 distinct keys", "samples", _distinct_keys, expect="accepted"),
]


def _req(doc: dict, response: str | None = "own", bare: bool = False) -> Probe:
    return Probe(_j(doc), response, bare)


REQUEST_KINDS: list[Kind] = [
    Kind("deep brackets [*100000", "predict", lambda m, s: Probe(b"[" * 100_000, "own")),
    Kind("bad JSON", "predict", lambda m, s: Probe(b'{"id": "%s", "x": [1, 2' % m.encode(), "own")),
    Kind("NaN in x", "predict", lambda m, s: _req({"id": m, "x": s.x(float("nan"))})),
    Kind("1e39 in x", "predict", lambda m, s: _req({"id": m, "x": s.x(1e39)})),
    Kind("wrong length", "predict", lambda m, s: _req({"id": m, "x": [[1, 2, 3]]})),
    Kind("strings in x", "predict", lambda m, s: _req({"id": m, "x": s.x("a")})),
    Kind("empty x", "predict", lambda m, s: _req({"id": m, "x": []})),
    Kind("missing x", "predict", lambda m, s: _req({"id": m})),
    Kind("oversize 1.5 MB", "predict", lambda m, s: Probe(_oversize(m, s).payload, "own")),
    Kind("nesting 50000 deep", "predict", lambda m, s: Probe(_nested(m, 50_000), "own")),
    Kind("30,000 rows", "predict", lambda m, s: _req({"id": m, "x": [s.x(0)] * 30_000})),
    Kind("90,000 unknown keys", "predict", lambda m, s: Probe(_unknown_keys(m, s).payload, "own")),
    Kind(
        "reply_to with control char",
        "predict",
        lambda m, s: _req({"id": m, "x": s.x(), "reply_to": "replies/x/\x01"}, "none"),
    ),
    Kind(
        "reply_to actors/x",
        "predict",
        lambda m, s: _req({"id": m, "x": s.x(), "reply_to": "{p}/actors/x"}, "none"),
    ),
    Kind(
        "reply_to another client",
        "predict",
        lambda m, s: _req({"id": m, "x": s.x(), "reply_to": "{p}/replies/victim/r"}, "none"),
    ),
    Kind(
        "Response Topic actors/x", "predict", lambda m, s: _req({"id": m, "x": s.x()}, "actors/x")
    ),
    Kind(
        "Response Topic another client",
        "predict",
        lambda m, s: _req({"id": m, "x": s.x()}, "replies/victim/r"),
    ),
    Kind("Response Topic samples", "predict", lambda m, s: _req({"id": m, "x": s.x()}, "samples")),
    Kind("Response Topic predict", "predict", lambda m, s: _req({"id": m, "x": s.x()}, "predict")),
    Kind(
        "Response Topic status (bare)",
        "predict",
        lambda m, s: _req({"id": m, "x": s.x()}, "status", bare=True),
    ),
    Kind(
        "Response Topic wildcard",
        "predict",
        lambda m, s: _req({"id": m, "x": s.x()}, "replies/h/#"),
    ),
    Kind(
        "Response Topic with U+FEFF",
        "predict",
        lambda m, s: _req({"id": m, "x": s.x()}, "replies/soak-h/\ufeff"),
    ),
    Kind(
        "Response Topic control char",
        "predict",
        lambda m, s: _req({"id": m, "x": s.x()}, "replies/h/\x01"),
        expect="broker",
    ),
]


def request_topics(names: Names, client: str, probe: Probe) -> tuple[str, str | None, bytes]:
    """(request topic, Response Topic, payload) of a hostile request from `client`."""
    model_root = names.topic("")[:-1]
    topic = names.predict_topic if probe.bare else f"{names.predict_topic}/{client}"
    if probe.response == "own":
        response = f"{names.topic('replies')}/{client}/h"
    elif probe.response in (None, "none"):
        response = None
    else:
        response = f"{model_root}/{probe.response}"
    payload = probe.payload.replace(b"{p}", model_root.encode())
    return topic, response, payload


def reply_allowed(names: Names, client: str, bare: bool, topic: str) -> bool:
    """Whether a reply to a request from `client` may land on `topic` (`actor.replies`)."""
    replies = names.topic("replies")
    if bare:
        return topic.startswith(replies + "/") or topic == names.predictions_topic
    own = f"{replies}/{client}"
    return topic == own or topic.startswith(own + "/")


@dataclass(frozen=True)
class Sent:
    n: int
    kind: Kind
    bare: bool = False
    closed_by_broker: bool = False
    at: float = 0.0  # time.monotonic() when sent


def outcomes(
    sent_all: list[Sent],
    seen: dict[bytes, list[tuple[str, str, str]]],
    deadletters: list[tuple[str, str, bytes, int]],
    names: Names,
    client: str,
    shape: Shape,
    excused: Callable[[Sent], bool] = lambda _s: False,
) -> tuple[list[dict], bool]:
    """One row per kind, in catalogue order: how many were refused as promised; True when
    all were. `seen`: correlation -> (topic, "error"/"y"/"other", error) of each reply.
    A request `excused` (sent while a request flood was served: the actor sheds what its
    inbox cannot hold, as it does valid requests then) counts as refused with no reply
    too; a reply outside the sender's reply space is a leak all the same."""
    marked: dict[int, list[str]] = defaultdict(list)  # marker number -> reasons
    unmarked: list[tuple[bytes, int]] = []
    for _source, reason, head, size in deadletters:
        found = {int(m) for m in MARKER.findall(head)}
        for n in found:
            marked[n].append(reason)
        if not found:
            unmarked.append((head, size))
    by_kind: dict[Kind, list[Sent]] = defaultdict(list)
    for s in sent_all:
        by_kind[s.kind].append(s)
    rows, all_ok = [], True
    for kind in (k for k in SAMPLE_KINDS + REQUEST_KINDS if k in by_kind):
        sent = by_kind[kind]
        if kind.topic == "samples" and not kind.marked:
            payload = kind.make("", shape).payload
            letters = sum(1 for h, n in unmarked if n == len(payload) and payload.startswith(h))
            ok, detail = min(letters, len(sent)), f"{letters} dead letters (matched by payload)"
        elif kind.topic == "samples":
            got = [marked.get(s.n, []) for s in sent]
            letters = sum(map(len, got))
            if kind.expect == "accepted":
                ok, detail = sum(not r for r in got), f"accepted; {letters} dead letters"
            else:
                ok = sum(1 for r in got if r and all(r))
                first = next((r[0] for r in got if r), "")
                detail = f"{letters} dead letters; {first[:60]}"
        elif kind.expect == "broker":
            ok = sum(s.closed_by_broker for s in sent)
            detail = "the broker closed the publisher's connection"
        else:
            ok, leaks, answered, shed, errors = 0, 0, 0, 0, []
            for s in sent:
                replies = seen.get(b"h%d" % s.n, [])
                mine = [v for t, v, _ in replies if reply_allowed(names, client, s.bare, t)]
                leaks += len(mine) < len(replies)
                answered += bool(replies)
                shed += not replies and excused(s)
                errors += [e for _, v, e in replies if v == "error"]
                ok += mine == ["error"] or (not replies and excused(s))
            detail = (
                f"replies {answered}, leaked {leaks}, shed in a flood {shed}; "
                f"{errors[0][:50] if errors else ''}"
            )
        all_ok &= ok == len(sent)
        rows.append(
            {
                "traffic": f"hostile {'samples' if kind.topic == 'samples' else 'request'}: "
                f"{kind.name}",
                "sent": len(sent),
                "ok": ok,
                "bad": len(sent) - ok,
                "detail": detail,
            }
        )
    return rows, all_ok


if __name__ == "__main__":
    from bench._hostile_cost import main

    raise SystemExit(main())
