"""A prediction request refused unread by its width: no decoding of what no valid request is.

The largest valid request of a model is known from its config (`max_request_rows` rows of
its sample shape; for named inputs, the fields each object may have), and so are its
separators: `:` and `,` (fields and values) and `[` and `{` (lists and objects). A scan of
the bytes counts them, where decoding 80,000 made-up fields costs a hundred valid requests.
Separators inside strings (a category, an id) are not the request's: a count over the
whole bytes decides the usual request, and one over it counts again outside its strings
(`unquoted`), so what a string may hold is never an allowance padding can spend.
"""

from __future__ import annotations

import math

import numpy as np

from streamlearn.config.app import ModelConfig
from streamlearn.contract.named import NamedFields
from streamlearn.errors import PayloadError

# A valid request's `:`, `,`, `[` and `{` outside its rows: its fields (id, reply_to, key,
# version, ...), with room to spare.
REQUEST_TEXT_CHARS = 1024
_QUOTE, _BACKSLASH = 34, 92
_VECTOR_BYTES = 16 * 1024  # `tally` counts longer texts with numpy
_FEW_QUOTES = 4096  # up to this many strings' quotes, `unquoted` slices between them


def unquoted(raw: bytes) -> np.ndarray:
    """The bytes of JSON text `raw` outside its strings (uint8), found without decoding it,
    escaped backslashes left out: `\\\\` pairs go first, as JSON reads them, left to right,
    and then a quote opens or closes a string unless a backslash comes right before it.
    Linear and vectorised: a few milliseconds a MiB, whatever the bytes (a regular
    expression over an unterminated string of escaped quotes is quadratic: seconds for 40
    KB). Where `raw` is not JSON, its decoder stops before the first byte this reads
    otherwise.

    >>> bytes(unquoted(rb'{"a,b": "x\\"[\\\\", "c": [1, 2]}'))
    b'{: , : [1, 2]}'
    """
    escapes = b"\\" in raw  # one byte's search: fast, and the usual request has none
    if escapes and b"\\\\" in raw:
        raw = raw.replace(b"\\\\", b"")  # an escaped backslash escapes nothing
    codes = np.frombuffer(raw, np.uint8)
    quotes = codes == _QUOTE
    if escapes:
        quotes[1:] &= codes[:-1] != _BACKSLASH  # an escaped quote: inside its string
    count = int(np.count_nonzero(quotes))
    if count == 0:
        return codes
    if count > _FEW_QUOTES:
        inside = np.cumsum(quotes, dtype=np.int32) & 1  # from an opening quote to its closing
        return codes[(inside == 0) & ~quotes]
    # Few strings: what lies between them, sliced (an unterminated one runs to the end).
    at = np.flatnonzero(quotes)
    ends = [*at[0::2].tolist(), *([len(raw)] if count % 2 == 0 else [])]
    starts = [0, *(at[1::2] + 1).tolist()]
    return np.frombuffer(b"".join(raw[a:b] for a, b in zip(starts, ends, strict=True)), np.uint8)


def tally(text: bytes | np.ndarray) -> tuple[int, int, int]:
    """The `:` and `,` of `text`, its `[` and its `{` (bytes, or codes as `unquoted` gives
    them): counts over bytes for a short text, vectorised for a long one (three times
    faster a MiB).

    >>> tally(b'{"a": [1, 2]}'), tally(np.frombuffer(b"[[{:", np.uint8))
    ((2, 1, 1), (1, 2, 1))
    """
    if isinstance(text, bytes) and len(text) < _VECTOR_BYTES:
        return text.count(b":") + text.count(b","), text.count(b"["), text.count(b"{")
    codes = np.frombuffer(text, np.uint8) if isinstance(text, bytes) else text

    def count(byte: bytes) -> int:
        return int(np.count_nonzero(codes == ord(byte)))

    return count(b":") + count(b","), count(b"["), count(b"{")


def separators(text: bytes, marks: int, opens: int) -> tuple[int, int, int]:
    """`tally` of `text` when it holds at most `marks` `:`/`,` and `opens` `[`/`{` in all
    (the usual request, decided by counts over its bytes); else `tally` outside its strings,
    what strings hold not counted."""
    counted = tally(text)
    if counted[0] <= marks and counted[1] + counted[2] <= opens:
        return counted
    return tally(unquoted(text))


class RequestWidth:
    """The separators one model's largest valid request holds (`named`: its named fields)."""

    def __init__(self, model: ModelConfig, named: NamedFields | None) -> None:
        self.model = model.name
        shape = model.sample_shape
        # A valid request's `,` and `:` (two per number of its largest batch) and `[`, `{`.
        rows, size = model.actor.max_request_rows, math.prod(shape)
        self.marks = 2 * rows * size + REQUEST_TEXT_CHARS
        self.opens = (len(shape) + 1) * rows * size + REQUEST_TEXT_CHARS
        self.object_marks = 0  # per object of a named request: its fields, their values
        if named is not None:
            self.object_marks = 2 * named.field_limit
            opens = rows * (2 + len(named.names)) + REQUEST_TEXT_CHARS
            self.opens = max(self.opens, opens)

    def check(self, raw: bytes) -> int:
        """Refuse, unread, a request with more `:`/`,` (fields, values) or `[`/`{` outside
        its strings than the model's largest valid request holds (`max_request_rows` rows;
        named: the fields each `{` may have): a scan of the bytes, where decoding 80,000
        made-up fields costs a hundred valid requests. Returns its lists and objects."""
        marks, lists, objects = separators(raw, self.marks, self.opens)
        opens = lists + objects
        limit = self.marks
        if self.object_marks:
            limit = max(limit, self.object_marks * objects + REQUEST_TEXT_CHARS)
        if marks > limit:
            raise PayloadError(
                f"request too wide: {marks} fields and values (counted by ':' and "
                f"','), a request of model {self.model!r} holds at most {limit}; "
                f"refused unread",
                "oversize",
            )
        if opens > self.opens:
            raise PayloadError(
                f"request too deep or too wide: {opens} lists and objects, a request of "
                f"model {self.model!r} holds at most {self.opens}; refused unread",
                "oversize",
            )
        return opens
