"""One-pass parsing of the common, fully valid sample payloads.

pydantic validates such a message in one pass (in Rust) against a schema built for one
model: fixed row lengths, float32 range, targets in range. It is stricter than the
reference path (`streamlearn.contract.payloads`), so whatever it accepts, the reference path accepts
with the same values; anything it refuses takes the reference path, which decides and
gives the reason (`tests/integration/test_ingest_fuzz.py` compares the two).
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic_core import from_json

from streamlearn.config.app import ModelConfig
from streamlearn.contract.records import SampleId, Samples

_F32_MAX = float(np.finfo(np.float32).max)
# A number that stays finite as float32: what the fast path accepts without numpy checks.
_F32 = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-_F32_MAX, le=_F32_MAX)]
# The most fields an object of the fast path has ({"x", "y", "id"}).
_MAX_FIELDS = 3


class FastSamples:
    """Parses the fully valid sample messages of one model; None for anything else."""

    def __init__(self, model: ModelConfig) -> None:
        self._schema, self._list = _schema(model)

    def parse(self, raw: bytes) -> Samples | None:
        """None: not a fully valid message (the reference path then says why). Fields are
        counted first: validation would report each unknown one, however many."""
        try:
            doc = from_json(raw)  # the parser validate_json uses
        except ValueError:
            return None
        if type(doc) is not dict or len(doc) > _MAX_FIELDS:
            return None
        items = doc.get("samples")
        if type(items) is list and any(type(i) is dict and len(i) > _MAX_FIELDS for i in items):
            return None
        try:
            doc = self._schema.validate_python(doc)
        except ValidationError:
            return None
        if type(doc) is self._list:
            rows = [s.x for s in doc.samples]
            y = [s.y for s in doc.samples]
            ids: list[Any] | None
            ids = [s.id for s in doc.samples]
            ids = None if all(i is None for i in ids) else ids
        elif isinstance(doc.y, list):
            rows, y, ids = doc.x, doc.y, doc.ids
            if len(y) != len(rows) or (ids is not None and len(ids) != len(y)):
                return None
        else:
            rows, y, ids = [doc.x], [doc.y], None if doc.id is None else [doc.id]
        return Samples(
            np.array(rows, dtype=np.float32),
            np.array(y, dtype=np.float32),
            None if ids is None else tuple(ids),
        )


def _schema(model: ModelConfig) -> tuple[TypeAdapter[Any], type[Any]]:
    """The model's single, columnar and list payloads, tried in that order; and the list's
    type, to tell it apart."""
    row: Any = _F32
    for size in reversed(model.sample_shape):
        row = Annotated[list[row], Field(min_length=size, max_length=size)]
    if model.task == "binary":
        target: Any = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=1)]
    elif model.task == "multiclass":
        target = Annotated[int, Field(strict=True, ge=0, lt=model.classes or 0)]
    else:
        target = _F32
    limit = model.ingest.max_samples_per_message
    strict = ConfigDict(extra="forbid", strict=True, frozen=True)
    one = create_model(
        "_FastSample", __config__=strict, x=(row, ...), y=(target, ...), id=(SampleId | None, None)
    )
    many = create_model(
        "_FastColumnar",
        __config__=strict,
        x=(Annotated[list[row], Field(min_length=1, max_length=limit)], ...),
        y=(Annotated[list[target], Field(min_length=1, max_length=limit)], ...),
        ids=(list[SampleId] | None, None),
    )
    items = create_model(
        "_FastList",
        __config__=strict,
        samples=(Annotated[list[one], Field(min_length=1, max_length=limit)], ...),
    )
    return TypeAdapter(Annotated[one | many | items, Field(union_mode="left_to_right")]), items
