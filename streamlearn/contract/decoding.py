"""A prediction request's bytes into its JSON object: the one decoder of a request.

What no valid request is, is refused before it is decoded, in the order that keeps a
hostile request cheap: its size (the actor's inbox keeps only the size of one over the
limit), its width (`streamlearn.contract.width`) and its nesting, each a scan of the
bytes. Then it is decoded once. pydantic's parser stops at a number of thousands of
digits where `json` reads it all first; `json` says why a payload is not JSON.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from pydantic_core import from_json

from streamlearn.config.app import ModelConfig
from streamlearn.contract.named import NamedFields
from streamlearn.contract.width import RequestWidth, unquoted
from streamlearn.errors import PayloadError

MAX_DEPTH = 16  # nesting of a request's JSON: {"x": [[[..]]]} needs 4 at most


class RequestDecoder:
    """Decodes one model's prediction requests (`named`: its named fields), checked first."""

    def __init__(self, model: ModelConfig, named: NamedFields | None) -> None:
        self.limit = model.ingest.max_payload_bytes
        self.width = RequestWidth(model, named)

    def decode(self, raw: bytes, size: int | None = None) -> dict[str, Any]:
        """The request's JSON object; PayloadError with the reason a user sees. `size`: its
        bytes as received, where `raw` may be b"" (kept unread, over the limit)."""
        size = len(raw) if size is None else size
        if size > self.limit:
            raise PayloadError(
                f"payload of {size} bytes exceeds max_payload_bytes={self.limit}", "oversize"
            )
        opens = self.width.check(raw)
        if opens > MAX_DEPTH and too_deep(raw, opens):
            raise PayloadError(
                f"invalid JSON: nested more than {MAX_DEPTH} levels deep", "invalid_json"
            )
        try:
            doc = from_json(raw)
        except ValueError as exc:
            if str(exc).startswith("number out of range"):
                raise PayloadError(f"invalid JSON: {exc}", "invalid_json") from None
            doc = _loads(raw)  # `json` says why, and reads a lone surrogate (the reply's id)
        if not isinstance(doc, dict):
            kind = type(doc).__name__
            raise PayloadError(f"payload must be a JSON object, got {kind}", "wrong_type")
        return doc


def too_deep(raw: bytes, opens: int | None = None) -> bool:
    """Whether arrays and objects nest more than `MAX_DEPTH` deep in `raw` (JSON), found
    without parsing it: a payload like `[` * 100000 never reaches the recursive parser.

    Linear in the payload, and for the usual requests a count of brackets decides (`opens`,
    when the caller counted them already).

    >>> too_deep(b'{"x": [[1, 2], [3]], "id": "' + b"[" * 20 + b'"}')
    False
    >>> too_deep(b"[" * 17), too_deep(b"[" * 16)
    (True, False)
    """
    if opens is None:
        opens = raw.count(b"[") + raw.count(b"{")
    if opens <= MAX_DEPTH:
        return False
    codes = unquoted(raw) | 0x20  # "[" -> "{", "]" -> "}"; what strings hold does not nest
    steps = (codes == ord("{")).astype(np.int32) - (codes == ord("}"))
    return int(np.cumsum(steps).max(initial=0)) > MAX_DEPTH


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except RecursionError:
        raise PayloadError("invalid JSON: nested too deeply", "invalid_json") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digit limit
        raise PayloadError(f"invalid JSON: {exc}", "invalid_json") from None
