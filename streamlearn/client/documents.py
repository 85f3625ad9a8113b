"""The documents a `Client` sends (docs/contract.md, Topics and payloads), built and checked
on the client's side so that an obvious mistake raises where it was made, not as a dead
letter on the service's side: a sample positional (`{"x": .., "y": ..}`) or named (an object
of the model's fields and its label), a prediction request, a label that comes later.

Each function returns the JSON document; `encode` makes it bytes and `pieces` cuts a long
list into messages under the ingest's caps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

# A named sample's or request's own fields, beside the model's (the config refuses them as names).
RESERVED = frozenset({"id", "ids", "key", "seq", "reply_to", "samples"})
MAX_ID_CHARS = 256


def encode(doc: Mapping[str, Any]) -> bytes:
    """Compact JSON; numpy arrays and scalars as lists and numbers, without importing numpy.

    >>> encode({"x": [1, 2.5], "id": "a"})
    b'{"x":[1,2.5],"id":"a"}'
    """
    return json.dumps(doc, separators=(",", ":"), default=_tolist).encode()


def _tolist(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def plain(values: Any) -> list:
    """A sequence (or an array) as a list of plain values."""
    if hasattr(values, "tolist"):
        return values.tolist()
    return [v.tolist() if hasattr(v, "tolist") else v for v in values]


def is_named(x: Any) -> bool:
    """Whether x is one named sample (a mapping) or a list of them."""
    if isinstance(x, Mapping):
        return True
    return isinstance(x, list | tuple) and bool(x) and all(isinstance(v, Mapping) for v in x)


def check_id(id: Any, what: str = "id") -> str:
    """A sample's or request's id: a non-empty string of at most 256 characters.

    >>> check_id("r-1")
    'r-1'
    >>> check_id(7)
    Traceback (most recent call last):
    ...
    ValueError: id must be a non-empty string of at most 256 characters, got 7
    """
    if not isinstance(id, str) or not 1 <= len(id) <= MAX_ID_CHARS:
        raise ValueError(
            f"{what} must be a non-empty string of at most {MAX_ID_CHARS} characters, got {id!r}"
        )
    return id


def check_number(y: Any, what: str = "y") -> float | int:
    """A label: a finite number (not a bool, not a string).

    >>> check_number(1)
    1
    >>> check_number("1")
    Traceback (most recent call last):
    ...
    ValueError: y must be a finite number, got '1'
    """
    if hasattr(y, "item") and not isinstance(y, list | tuple):
        y = y.item()  # a numpy scalar
    if isinstance(y, bool) or not isinstance(y, int | float) or not math.isfinite(y):
        raise ValueError(f"{what} must be a finite number, got {y!r}")
    return y


def named(fields: Mapping[str, Any], id: str | None = None) -> dict[str, Any]:
    """One named sample or request: the fields as they are, `id` added when given.

    >>> named({"temperature": 88.0, "failed": 1}, id="m-1")
    {'temperature': 88.0, 'failed': 1, 'id': 'm-1'}
    >>> named({"temperature": 88.0, "key": 1})
    Traceback (most recent call last):
    ...
    ValueError: a named sample's field 'key' is one of the payload's own (id, ids, key, ...)
    """
    doc: dict[str, Any] = {}
    for name, value in fields.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"a named sample's field names are non-empty strings, got {name!r}")
        if name in RESERVED and not (name == "id" and id is None):
            raise ValueError(
                f"a named sample's field {name!r} is one of the payload's own (id, ids, key, ...)"
            )
        doc[name] = value.tolist() if hasattr(value, "tolist") else value
    if "id" in doc:
        check_id(doc["id"])
    if id is not None:
        doc["id"] = check_id(id)
    return doc


def sample(x: Any, y: Any, id: str | None, key: str | None, seq: float | None) -> dict[str, Any]:
    """A sample's document: named (x a mapping holding its label), positional, or a keyed
    observation (one step of a windowed model)."""
    if isinstance(x, Mapping):
        if y is not None or key is not None or seq is not None:
            raise ValueError(
                "a named sample carries its label as one of its fields (the model's target); "
                "y=, key= and seq= go with a positional x"
            )
        return named(x, id)
    if key is None:
        if y is None or seq is not None:
            raise ValueError("a sample needs y (and seq= only goes with key=)")
        doc: dict[str, Any] = {"x": x, "y": y}
        if id is not None:
            doc["id"] = check_id(id)
        return doc
    if seq is None or id is not None:
        raise ValueError("an observation (key=) needs seq= and takes no id=")
    doc = {"key": key, "seq": seq, "x": x}
    if y is not None:
        doc["y"] = y
    return doc


def request(x: Any, id: str | None, key: str | None, seq: float | None) -> dict[str, Any]:
    """A prediction request: named fields, or `{"x": ..}`; with `id` a label may join it later."""
    if seq is not None and key is None:
        raise ValueError("seq= needs key=")
    if isinstance(x, Mapping):
        if key is not None:
            raise ValueError("key= goes with a positional x (a device's newest step)")
        return named(x, id)
    body: dict[str, Any] = {"x": x} if key is None else {"key": key, "x": x}
    if seq is not None:
        body["seq"] = seq
    if id is not None:
        body["id"] = check_id(id)
    return body


def label(id: Any, y: Any) -> dict[str, Any]:
    """A label for an earlier prediction request that carried `id`.

    >>> label("r-1", 0)
    {'id': 'r-1', 'y': 0}
    >>> label(None, 1)
    Traceback (most recent call last):
    ...
    ValueError: a label's id must be a non-empty string of at most 256 characters, got None
    """
    return {"id": check_id(id, "a label's id"), "y": check_number(y, f"the label of {id!r}")}


def labels(pairs: Sequence[tuple[Any, Any]]) -> list[dict[str, Any]]:
    """(id, y) pairs as label documents; a pair that is not one raises, naming its index."""
    out = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ValueError(f"labels[{i}]: an (id, y) pair, got {pair!r}")
        out.append(label(*pair))
    return out


def pieces(
    count: int,
    build: Callable[[int, int], Mapping[str, Any]],
    max_items: int,
    max_bytes: int,
    what: str = "sample",
) -> Iterator[bytes]:
    """Messages of `build(start, stop)` over `count` items, each at most `max_items` and
    `max_bytes`: a chunk too large is cut to the share that fits, so each item is encoded a
    few times at most."""
    start, n = 0, max_items
    while start < count:
        n = min(n, count - start)
        body = encode(build(start, start + n))
        if len(body) <= max_bytes:
            yield body
            start += n
        elif n == 1:
            raise ValueError(
                f"{what} {start} alone is {len(body)} bytes, over max_payload_bytes={max_bytes}"
            )
        else:
            n = max(1, n * max_bytes // len(body))
