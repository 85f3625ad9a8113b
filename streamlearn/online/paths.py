"""Dotted field names: how a named input reaches into the JSON a device publishes.

`"ENERGY.Power"` reads `{"ENERGY": {"Power": 85}}`; a level of digits also indexes an
array, so `"ENERGY.Power.1"` reads the second channel of `{"ENERGY": {"Power": [85, 12]}}`
(an object's key `"1"` too). A single value is its own first element, as Tasmota writes
one channel's `"Power": 85` and two channels' `"Power": [85, 12]`: `"ENERGY.Power.0"`
reads both devices' first channel. One syntax for the library (`OnlineModel`) and the service
(`streamlearn.contract.named`), so both read a name the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Path = tuple[tuple[str, int | None], ...]


def path_of(name: str) -> Path:
    """A dotted name's levels, each with its index where it is one (digits).

    >>> path_of("ENERGY.Power.0")
    (('ENERGY', None), ('Power', None), ('0', 0))
    """
    return tuple((part, int(part) if part.isdigit() else None) for part in name.split("."))


def dig(doc: Any, path: Path) -> Any:
    """The value at `path` in `doc`; None where a level is missing (an index past the
    array's end included) or where a level reaches into a number or a string.

    >>> doc = {"ENERGY": {"Power": [85, 12]}, "ok": True}
    >>> dig(doc, path_of("ENERGY.Power.1")), dig(doc, path_of("ENERGY.Power.2"))
    (12, None)
    >>> dig(doc, path_of("ok.x")), dig({"a": {"0": 4}}, path_of("a.0"))
    (None, 4)
    >>> dig({"Power": 85}, path_of("Power.0")), dig({"Power": 85}, path_of("Power.1"))
    (85, None)
    """
    for key, index in path:
        if type(doc) is dict or isinstance(doc, Mapping):  # a dict first: the common case
            doc = doc.get(key)
        elif index is None:
            return None
        elif isinstance(doc, Sequence) and not isinstance(doc, str):
            doc = doc[index] if index < len(doc) else None
        elif index != 0:
            return None  # a single value has one element
        if doc is None:
            return None
    return doc
