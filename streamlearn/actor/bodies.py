"""How large and how wide an Open Inference Protocol request may be, known before reading it.

A model's largest valid inference request follows from its config: `max_request_rows` rows
of its inputs, each number at most `NUMBER_BYTES` of JSON (24 characters printed, with its
separator, brackets and indentation) or 8 bytes as a binary tensor (FP64, INT64), each
categorical string at most `MAX_CATEGORY_CHARS` characters (escaped in JSON: 6 bytes each;
4 in UTF-8 with a binary tensor's 4-byte length), plus what names, shapes, datatypes,
parameters and the id take (`TENSOR_BYTES` a tensor, `REQUEST_BYTES` a request). The HTTP
door refuses a longer Content-Length unread (413), stops a chunked body there, and counts a
JSON part's separators outside its strings before decoding it, as the MQTT door does
(`contract.width`), with the protocol's own counts: its numbers are flat or nested in
lists, its envelope is small.
"""

from __future__ import annotations

import math

from streamlearn.config.app import ModelConfig
from streamlearn.config.inputs import MAX_CATEGORY_CHARS
from streamlearn.contract.width import separators
from streamlearn.errors import PayloadError

NUMBER_BYTES = 48  # a number in the protocol's JSON, with separators and nesting, at most
BINARY_NUMBER_BYTES = 8  # FP64, INT64, UINT64: the widest numeric datatype
STRING_BYTES = 6 * MAX_CATEGORY_CHARS + 16  # a categorical value in JSON, every char escaped
BINARY_STRING_BYTES = 4 + 4 * MAX_CATEGORY_CHARS  # its length, then UTF-8
TENSOR_BYTES = 1024  # a tensor's name, shape, datatype, parameters (and 6 bytes a name char)
REQUEST_BYTES = 4096  # a request's id, outputs, parameters
TENSOR_MARKS = 32  # a tensor's `:` and `,` outside its data
REQUEST_MARKS = 1024  # a request's, and what its id may hold


class BodyBounds:
    """The bytes and the separators of one model's largest valid inference request."""

    def __init__(self, model: ModelConfig) -> None:
        self.model = model.name
        rows = model.actor.max_request_rows
        fields = list(model.fields or ())
        categorical = len(model.categorical) if fields else 0
        numbers = math.prod(model.sample_shape)  # named: every input, categorical or not
        tensors = max(len(fields), 1)
        names = sum(6 * len(name) for name in fields)
        self.envelope = REQUEST_BYTES + tensors * TENSOR_BYTES + names
        # The JSON form (`json_bytes`) bounds a binary request's JSON part too: any of its
        # tensors may come as JSON.
        self.json_bytes = self.envelope + rows * (
            numbers * NUMBER_BYTES + categorical * STRING_BYTES
        )
        self.binary_bytes = rows * (
            numbers * BINARY_NUMBER_BYTES + categorical * BINARY_STRING_BYTES
        )
        self.max_payload_bytes = model.ingest.max_payload_bytes
        # `,`/`:` outside strings: one per number and per list of numbers.
        self.marks = 2 * rows * numbers + tensors * TENSOR_MARKS + REQUEST_MARKS
        # `[`/`{` outside strings: a list per row and per step of a window, for each tensor.
        steps = math.prod(model.sample_shape[:-1])
        self.opens = tensors * (rows * (1 + steps) + 8) + REQUEST_MARKS

    def limit(self, header_length: int | None) -> int:
        """The most bytes a valid body holds: JSON, or a JSON part of `header_length` bytes
        (Triton's binary tensor extension) and binary tensors after it; and never more than
        `ingest.max_payload_bytes`. PayloadError `too_large` (413) for a longer JSON part."""
        if header_length is None:
            return min(self.json_bytes, self.max_payload_bytes)
        if header_length > self.json_bytes:
            raise PayloadError(
                f"Inference-Header-Content-Length {header_length}: a request of model "
                f"{self.model!r} has at most {self.json_bytes} bytes of JSON; refused unread",
                "too_large",
            )
        return min(header_length + self.binary_bytes, self.max_payload_bytes)

    def check(self, head: bytes) -> None:
        """Refuse, undecoded, a JSON part with more fields and values (`:`, `,`) or lists and
        objects (`[`, `{`) outside its strings than the model's largest valid request holds:
        a scan of the bytes, where decoding a padded megabyte holds the GIL for a tenth of a
        second. A count over the whole decides the usual request; past it, one outside the
        strings (`unquoted`), so what a category may hold is no allowance for padding."""
        marks, lists, objects = separators(head, self.marks, self.opens)
        if marks > self.marks:
            raise PayloadError(
                f"request too wide: {marks} fields and values (counted by ':' and ','), a "
                f"request of model {self.model!r} holds at most {self.marks}; refused unread",
                "oversize",
            )
        opens = lists + objects
        if opens > self.opens:
            raise PayloadError(
                f"request too deep or too wide: {opens} lists and objects, a request of "
                f"model {self.model!r} holds at most {self.opens}; refused unread",
                "oversize",
            )
