"""A prediction request refused unread by its width: no decoding of what no valid request is.

The largest valid request of a model is known from its config (`max_request_rows` rows of
its sample shape; for named inputs, the fields each object may have), and so are its
separators: `:` and `,` (fields and values) and `[` and `{` (lists and objects). A scan of
the bytes counts them, where decoding 80,000 made-up fields costs a hundred valid requests.
"""

from __future__ import annotations

import math

from streamlearn.config.app import ModelConfig
from streamlearn.config.inputs import MAX_CATEGORY_CHARS
from streamlearn.contract.named import NamedFields
from streamlearn.errors import PayloadError

# Characters a valid request's strings hold at most (id 256, reply_to 512, key 128), each
# of which may be a `,` or `:`.
REQUEST_TEXT_CHARS = 1024


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
            categorical = MAX_CATEGORY_CHARS * len(model.categorical)
            self.object_marks = 2 * named.field_limit + categorical
            opens = rows * (2 + len(named.names)) + REQUEST_TEXT_CHARS
            self.opens = max(self.opens, opens)

    def check(self, raw: bytes) -> int:
        """Refuse, unread, a request with more `:`/`,` (fields, values) or `[`/`{` than the
        model's largest valid request holds (`max_request_rows` rows; named: the fields each
        `{` may have; plus what strings may hold): a scan of the bytes, where decoding 80,000
        made-up fields costs a hundred valid requests. Returns its lists and objects."""
        limit = self.marks
        marks, commas = raw.count(b":"), -1
        if marks <= limit:
            commas = raw.count(b",")
            marks += commas
        objects = raw.count(b"{") if marks > limit and self.object_marks else -1
        if objects >= 0:
            limit = max(limit, self.object_marks * objects + REQUEST_TEXT_CHARS)
            if commas < 0 and marks <= limit:
                marks += raw.count(b",")
        if marks > limit:
            raise PayloadError(
                f"request too wide: at least {marks} fields and values (counted by ':' and "
                f"','), a request of model {self.model!r} holds at most {limit}; "
                f"refused unread",
                "oversize",
            )
        opens = raw.count(b"[") + (raw.count(b"{") if objects < 0 else objects)
        if opens > self.opens:
            raise PayloadError(
                f"request too deep or too wide: {opens} lists and objects, a request of "
                f"model {self.model!r} holds at most {self.opens}; refused unread",
                "oversize",
            )
        return opens
