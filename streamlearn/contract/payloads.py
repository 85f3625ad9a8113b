"""Parsing and validation of MQTT payloads (samples and prediction requests).

Pure functions of bytes: no I/O, no Keras, so ingest stays light. What is valid becomes
the records of `streamlearn.contract.records`; anything invalid raises `PayloadError` whose message
is the reason a user sees (dead letter or error reply). The common, fully valid sample
messages take a one-pass path first (`streamlearn.contract.fastparse`).

A model with a `window` also takes keyed observations: `{"key": .., "seq": .., "x": [F
numbers], "y"?: ..}`, one step of one device's sequence, from which the service builds
that device's windows itself (`streamlearn.store.windows`); and key-only prediction requests
`{"key": .., "x": [F numbers], "seq"?: ..}` whose earlier steps come from the same store.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from streamlearn.config import ModelConfig
from streamlearn.contract.fastparse import FastSamples
from streamlearn.contract.records import (
    Kind,
    Observations,
    Parsed,
    Rejection,
    Request,
    SampleId,
    Samples,
    concat,
    concat_observations,
)
from streamlearn.errors import PayloadError

Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
RequestId = Annotated[str, Field(strict=True, max_length=256)] | Annotated[int, Field(strict=True)]
Topic = Annotated[str, Field(strict=True, min_length=1, max_length=512, pattern=r"^[^#+]+$")]
# A device's key names a Redis key: short, no whitespace or control characters.
WindowKey = Annotated[
    str, Field(strict=True, min_length=1, max_length=128, pattern=r"^[^\s\x00-\x1f\x7f]+$")
]
# Sequence numbers or unix timestamps; Redis scores are doubles, exact up to 2**53.
Seq = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-(2**53), le=2**53)]
# The most fields a valid object has ({"key", "seq", "x", "y"}): a document with more is
# rejected after counting, before validation, which would report each unknown field.
MAX_FIELDS = 4
FIELDS = frozenset(("x", "y", "id", "ids", "samples", "key", "seq"))
# Reasons of rejected items a message's one dead letter lists (with their indexes).
LISTED_REASONS = 5


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Sample(_Strict):
    x: list[Any]
    y: Finite
    id: SampleId | None = None


class _Columnar(_Strict):
    x: list[Any] = Field(min_length=1)
    y: list[Finite] = Field(min_length=1)
    ids: list[SampleId] | None = None


class _SampleList(_Strict):
    samples: list[Any] = Field(min_length=1)


class _Observation(_Strict):
    key: WindowKey
    seq: Seq
    x: list[Any]
    y: Finite | None = None


class _Request(_Strict):
    x: list[Any] = Field(min_length=1)
    id: RequestId | None = None
    reply_to: Topic | None = None


class _KeyedRequest(_Request):
    key: WindowKey
    seq: Seq | None = None


def _nested(depth: int) -> TypeAdapter[Any]:
    inner: Any = Finite
    for _ in range(depth):
        inner = list[inner]
    return TypeAdapter(inner)


# pydantic's error types -> dead-letter kinds (anything else: "other")
_KINDS: dict[str, Kind] = {
    "extra_forbidden": "unknown_field",
    "missing": "missing_field",
    "finite_number": "non_finite",
    "too_short": "wrong_shape",
    "too_long": "wrong_shape",
    "float_type": "wrong_type",
    "float_parsing": "wrong_type",
    "int_type": "wrong_type",
    "string_type": "wrong_type",
    "list_type": "wrong_type",
    "model_type": "wrong_type",
    "dict_type": "wrong_type",
    "string_too_short": "bad_string",
    "string_too_long": "bad_string",
    "string_pattern_mismatch": "bad_string",
    "less_than_equal": "out_of_range",
    "greater_than_equal": "out_of_range",
}


def _invalid(exc: ValidationError, root: str = "") -> PayloadError:
    """The PayloadError of pydantic's first error, with its kind."""
    return PayloadError(_reason(exc, root), _KINDS.get(exc.errors()[0]["type"], "other"))


def _check_fields(doc: dict[str, Any]) -> None:
    """Count a document's fields before validating it: each unknown one would cost an
    error, so a document of 90,000 made-up fields is refused here, naming a few."""
    if len(doc) <= MAX_FIELDS:
        return
    unknown = [k for k in doc if k not in FIELDS]
    named = ", ".join(repr(k if len(k) <= 40 else k[:37] + "...") for k in unknown[:3])
    more = f" (and {len(unknown) - 3} more)" if len(unknown) > 3 else ""
    raise PayloadError(
        f"{len(doc)} fields, at most {MAX_FIELDS} allowed; unknown: {named}{more}",
        "unknown_field",
    )


def _reason(exc: ValidationError, root: str = "") -> str:
    err = exc.errors()[0]
    loc = ".".join([root, *(str(p) for p in err["loc"])]).strip(".")
    value = repr(err.get("input"))
    value = value if len(value) <= 40 else value[:37] + "..."
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{loc}: {err['msg']}, got {value}{more}" if loc else f"{err['msg']}{more}"


def _decode(raw: bytes, limit: int) -> dict[str, Any]:
    if len(raw) > limit:
        raise PayloadError(
            f"payload of {len(raw)} bytes exceeds max_payload_bytes={limit}", "oversize"
        )
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise PayloadError("invalid JSON: nested too deeply", "invalid_json") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digit limit
        raise PayloadError(f"invalid JSON: {exc}", "invalid_json") from None
    if not isinstance(doc, dict):
        raise PayloadError(f"payload must be a JSON object, got {type(doc).__name__}", "wrong_type")
    return doc


class PayloadParser:
    """Validates payloads against one model's input shape and task.

    `fast=False` turns off the one-pass path for the common valid payloads, leaving the
    reference path alone (the property tests compare the two).
    """

    def __init__(self, model: ModelConfig, fast: bool = True) -> None:
        self.model = model
        self.shape = model.sample_shape
        self._one = _nested(len(self.shape))
        self._one_step = _nested(1)
        self._many = _nested(len(self.shape) + 1)
        self._fast = FastSamples(model) if fast else None

    # -- samples -------------------------------------------------------------------------

    def parse_message(self, raw: bytes) -> Parsed:
        """Split a samples message into what is accepted and what is rejected.

        A `{"samples": [...]}` list is judged item by item, so one bad sample does not
        hold back the good ones beside it; a single or columnar payload is judged whole.
        """
        if self._fast is not None and len(raw) <= self.model.ingest.max_payload_bytes:
            samples = self._fast.parse(raw)
            if samples is not None:
                return Parsed(samples, None, [])
        try:
            doc = _decode(raw, self.model.ingest.max_payload_bytes)
            _check_fields(doc)
            if "samples" in doc:
                return self._parse_list(doc, raw)
            item = self._parse_item(doc)
        except PayloadError as exc:
            return Parsed(None, None, [Rejection(str(exc), raw, exc.kind)])
        if isinstance(item, Observations):
            return Parsed(None, item, [])
        return Parsed(item, None, [])

    def _parse_list(self, doc: dict[str, Any], raw: bytes) -> Parsed:
        """Items are judged one by one; the rejected ones make one dead letter together
        (a message of 10,000 bad items must not flush the capped dead-letter stream)."""
        try:
            items = _SampleList.model_validate(doc).samples
        except ValidationError as exc:
            raise _invalid(exc) from None
        self._check_count(len(items))
        good: list[Samples] = []
        seen: list[Observations] = []
        bad: list[tuple[int, PayloadError]] = []  # the first LISTED_REASONS
        rejected = 0
        keys: set[str] = set()
        for i, item in enumerate(items):
            try:
                if not isinstance(item, dict) or isinstance(item.get("y"), list):
                    raise PayloadError("must be one sample object {x, y, id?}", "wrong_type")
                _check_fields(item)
                parsed = self._parse_item(item)
                if isinstance(parsed, Observations):
                    self._count_key(parsed.keys[0], keys)
            except PayloadError as exc:
                rejected += 1
                if len(bad) < LISTED_REASONS:
                    bad.append((i, exc))
                continue
            (seen if isinstance(parsed, Observations) else good).append(parsed)
        if not rejected:
            return Parsed(concat(good), concat_observations(seen), [])
        listed = "; ".join(f"samples.{i}: {exc}" for i, exc in bad)
        more = f"and {rejected - len(bad)} more; " if rejected > len(bad) else ""
        reason = f"{listed} ({more}{rejected} of {len(items)} samples rejected)"
        summary = Rejection(reason, raw, bad[0][1].kind)
        return Parsed(concat(good), concat_observations(seen), [summary])

    def _count_key(self, key: str, keys: set[str]) -> None:
        """Bound the devices one message can add: its first `max_keys_per_message`."""
        if key in keys:
            return
        limit = self.model.ingest.max_keys_per_message
        if len(keys) >= limit:
            raise PayloadError(
                f"key {key!r}: more than max_keys_per_message={limit} distinct keys",
                "too_many_keys",
            )
        keys.add(key)

    def _parse_item(self, doc: dict[str, Any]) -> Samples | Observations:
        if "key" not in doc:
            return self._parse_record(doc)
        if self.model.window is None:
            raise PayloadError(
                f"key: keyed observations need a model with a window, "
                f"model {self.model.name!r} has none",
                "no_window",
            )
        return self._parse_observation(doc)

    def _parse_observation(self, doc: dict[str, Any]) -> Observations:
        try:
            rec = _Observation.model_validate(doc)
        except ValidationError as exc:
            raise _invalid(exc) from None
        x = self._step(rec.x)
        y = np.full(1, np.nan, np.float32) if rec.y is None else self._check_targets([rec.y])
        return Observations((rec.key,), np.array([rec.seq], np.float64), x, y)

    def _step(self, raw_x: list[Any]) -> np.ndarray:
        """One step of a window, `inputs` numbers, as a (1, inputs) float32 array."""
        try:
            x = self._one_step.validate_python(raw_x)
        except ValidationError as exc:
            raise _invalid(exc, "x") from None
        if len(x) != self.model.inputs:
            raise PayloadError(
                f"x of a keyed observation must have shape [{self.model.inputs}] "
                f"(one step), got [{len(x)}]",
                "wrong_shape",
            )
        with np.errstate(over="ignore"):
            arr = np.asarray([x], dtype=np.float32)
        if not np.all(np.isfinite(arr)):
            raise PayloadError("x: value out of float32 range", "non_finite")
        return arr

    def _parse_record(self, doc: dict[str, Any]) -> Samples:
        columnar = isinstance(doc.get("y"), list)
        try:
            rec = (_Columnar if columnar else _Sample).model_validate(doc)
        except ValidationError as exc:
            raise _invalid(exc) from None
        try:
            x = (self._many if columnar else self._one).validate_python(rec.x)
        except ValidationError as exc:
            raise _invalid(exc, "x") from None
        x = self._to_array(x, batched=columnar)
        if columnar:
            y, ids = rec.y, rec.ids
            self._check_count(len(y))
            if len(y) != len(x):
                raise PayloadError(f"x has {len(x)} rows but y has {len(y)}", "wrong_shape")
            if ids is not None and len(ids) != len(y):
                raise PayloadError(f"ids has {len(ids)} entries but y has {len(y)}", "wrong_shape")
        else:
            y, ids = [rec.y], None if rec.id is None else [rec.id]
        return Samples(x, self._check_targets(y), None if ids is None else tuple(ids))

    def _check_count(self, n: int) -> None:
        limit = self.model.ingest.max_samples_per_message
        if n > limit:
            raise PayloadError(
                f"{n} samples exceed max_samples_per_message={limit}", "too_many_samples"
            )

    def _check_targets(self, y: list[float]) -> np.ndarray:
        with np.errstate(over="ignore"):
            arr = np.asarray(y, dtype=np.float32)
        task = self.model.task
        if task == "binary" and not np.all((arr >= 0) & (arr <= 1)):
            raise PayloadError(f"y must be in [0, 1] for a binary model, got {y[:5]}", "bad_target")
        if task == "multiclass":
            classes = self.model.classes or 0
            if not np.all((arr == np.round(arr)) & (arr >= 0) & (arr < classes)):
                raise PayloadError(
                    f"y must be a class index in 0..{classes - 1}, got {y[:5]}", "bad_target"
                )
        if not np.all(np.isfinite(arr)):
            raise PayloadError("y: value out of float32 range", "non_finite")
        return arr

    def _to_array(self, x: list[Any], batched: bool) -> np.ndarray:
        try:
            with np.errstate(over="ignore"):
                arr = np.asarray(x, dtype=np.float32)
        except ValueError:
            raise PayloadError("x: rows of different lengths", "wrong_shape") from None
        got = arr.shape[1:] if batched else arr.shape
        if got != self.shape:
            want = "x" if not batched else "each row of x"
            raise PayloadError(
                f"{want} must have shape {list(self.shape)}, got {list(got)}", "wrong_shape"
            )
        if not np.all(np.isfinite(arr)):
            raise PayloadError("x: value out of float32 range", "non_finite")
        return arr if batched else arr[None]

    # -- prediction requests -------------------------------------------------------------

    def parse_request(self, raw: bytes | dict[str, Any]) -> Request:
        """Validate a prediction request; one sample or a batch of rows. `raw` may be the
        JSON object already decoded (the actor decodes once, to route its reply)."""
        doc = raw if isinstance(raw, dict) else _decode(raw, self.model.ingest.max_payload_bytes)
        if "key" in doc:
            return self._parse_keyed_request(doc)
        try:
            req = _Request.model_validate(doc)
        except ValidationError as exc:
            raise PayloadError(_reason(exc)) from None
        batched = _depth(req.x) > len(self.shape)
        try:
            x = (self._many if batched else self._one).validate_python(req.x)
        except ValidationError as exc:
            raise PayloadError(_reason(exc, "x")) from None
        return Request(self._to_array(x, batched), batched, req.id, req.reply_to)

    def _parse_keyed_request(self, doc: dict[str, Any]) -> Request:
        if self.model.window is None:
            raise PayloadError(
                f"key: key-only requests need a model with a window, "
                f"model {self.model.name!r} has none"
            )
        try:
            req = _KeyedRequest.model_validate(doc)
        except ValidationError as exc:
            raise PayloadError(_reason(exc)) from None
        x = self._step(req.x)
        return Request(x, False, req.id, req.reply_to, key=req.key, seq=req.seq)


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, list) and value:
        depth, value = depth + 1, value[0]
    return depth
