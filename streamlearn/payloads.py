"""Parsing and validation of MQTT payloads (samples and prediction requests).

Pure functions of bytes: no I/O, no Keras, so ingest stays light. Anything invalid raises
`PayloadError` whose message is the reason a user sees (dead letter or error reply).

A model with a `window` also takes keyed observations: `{"key": .., "seq": .., "x": [F
numbers], "y"?: ..}`, one step of one device's sequence, from which the service builds
that device's windows itself (`streamlearn.windows`); and key-only prediction requests
`{"key": .., "x": [F numbers], "seq"?: ..}` whose earlier steps come from the same store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model

from streamlearn.config import ModelConfig
from streamlearn.errors import PayloadError

Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
_F32_MAX = float(np.finfo(np.float32).max)
# A number that stays finite as float32: what the fast path accepts without numpy checks.
_F32 = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-_F32_MAX, le=_F32_MAX)]
SampleId = Annotated[str, Field(strict=True, min_length=1, max_length=256)]
RequestId = Annotated[str, Field(strict=True, max_length=256)] | Annotated[int, Field(strict=True)]
Topic = Annotated[str, Field(strict=True, min_length=1, max_length=512, pattern=r"^[^#+]+$")]
# A device's key names a Redis key: short, no whitespace or control characters.
WindowKey = Annotated[
    str, Field(strict=True, min_length=1, max_length=128, pattern=r"^[^\s\x00-\x1f\x7f]+$")
]
# Sequence numbers or unix timestamps; Redis scores are doubles, exact up to 2**53.
Seq = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-(2**53), le=2**53)]


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


@dataclass(frozen=True)
class Samples:
    """Accepted samples of one message: `x` is (n, *sample_shape), `y` is (n,), float32."""

    x: np.ndarray
    y: np.ndarray
    ids: tuple[str | None, ...] | None = None

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class Observations:
    """Accepted keyed observations, in arrival order: `keys[i]` saw `x[i]` (inputs,) at
    `seq[i]`; `y[i]` is NaN for an observation without a target (it only extends its
    key's window). `seq` is float64, `x` and `y` float32."""

    keys: tuple[str, ...]
    seq: np.ndarray
    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class Rejection:
    """One rejected part of a message and why."""

    reason: str
    payload: bytes


class Parsed(NamedTuple):
    """What a samples message holds: whole samples, keyed observations, rejected parts."""

    samples: Samples | None
    observations: Observations | None
    rejections: list[Rejection]


@dataclass(frozen=True)
class Request:
    """A valid prediction request: `x` is (n, *sample_shape); `batched` says reply with a list.

    A keyed request (`key` set) has only the newest step, `x` (1, inputs): the earlier
    steps of its window are the key's stored observations (before `seq`, when given).
    """

    x: np.ndarray
    batched: bool
    id: str | int | None = None
    reply_to: str | None = None
    key: str | None = None
    seq: float | None = None


def _nested(depth: int) -> TypeAdapter[Any]:
    inner: Any = Finite
    for _ in range(depth):
        inner = list[inner]
    return TypeAdapter(inner)


def _reason(exc: ValidationError, root: str = "") -> str:
    err = exc.errors()[0]
    loc = ".".join([root, *(str(p) for p in err["loc"])]).strip(".")
    value = repr(err.get("input"))
    value = value if len(value) <= 40 else value[:37] + "..."
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{loc}: {err['msg']}, got {value}{more}" if loc else f"{err['msg']}{more}"


def _decode(raw: bytes, limit: int) -> dict[str, Any]:
    if len(raw) > limit:
        raise PayloadError(f"payload of {len(raw)} bytes exceeds max_payload_bytes={limit}")
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise PayloadError("invalid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digit limit
        raise PayloadError(f"invalid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PayloadError(f"payload must be a JSON object, got {type(doc).__name__}")
    return doc


def _fast_schema(model: ModelConfig) -> tuple[TypeAdapter[Any], type]:
    """One-pass JSON validation (in Rust) of the common, fully valid sample payloads.

    Stricter than the reference path (fixed row lengths, float32 range, targets in range),
    so whatever it accepts, the reference path accepts with the same values; anything it
    refuses takes the reference path, which decides and gives the reason.
    """
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
        self._fast, self._fast_list = _fast_schema(model) if fast else (None, None)

    # -- samples -------------------------------------------------------------------------

    def parse_message(self, raw: bytes) -> Parsed:
        """Split a samples message into what is accepted and what is rejected.

        A `{"samples": [...]}` list is judged item by item, so one bad sample does not
        hold back the good ones beside it; a single or columnar payload is judged whole.
        """
        if self._fast is not None and len(raw) <= self.model.ingest.max_payload_bytes:
            samples = self._parse_fast(raw)
            if samples is not None:
                return Parsed(samples, None, [])
        try:
            doc = _decode(raw, self.model.ingest.max_payload_bytes)
            if "samples" in doc:
                return self._parse_list(doc)
            item = self._parse_item(doc)
        except PayloadError as exc:
            return Parsed(None, None, [Rejection(str(exc), raw)])
        if isinstance(item, Observations):
            return Parsed(None, item, [])
        return Parsed(item, None, [])

    def parse_samples(self, raw: bytes) -> tuple[Samples | None, list[Rejection]]:
        """`parse_message` for whole samples: what a model without a window takes (keyed
        observations are left out; such a model rejects them)."""
        parsed = self.parse_message(raw)
        return parsed.samples, parsed.rejections

    def _parse_fast(self, raw: bytes) -> Samples | None:
        assert self._fast is not None
        try:
            doc = self._fast.validate_json(raw)
        except ValidationError:
            return None
        if type(doc) is self._fast_list:
            rows = [s.x for s in doc.samples]
            y = [s.y for s in doc.samples]
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

    def _parse_list(self, doc: dict[str, Any]) -> Parsed:
        try:
            items = _SampleList.model_validate(doc).samples
        except ValidationError as exc:
            raise PayloadError(_reason(exc)) from None
        self._check_count(len(items))
        good: list[Samples] = []
        seen: list[Observations] = []
        bad: list[Rejection] = []
        for i, item in enumerate(items):
            try:
                if not isinstance(item, dict) or isinstance(item.get("y"), list):
                    raise PayloadError("must be one sample object {x, y, id?}")
                parsed = self._parse_item(item)
            except PayloadError as exc:
                bad.append(Rejection(f"samples.{i}: {exc}", json.dumps(item).encode()))
                continue
            (seen if isinstance(parsed, Observations) else good).append(parsed)
        return Parsed(concat(good), concat_observations(seen), bad)

    def _parse_item(self, doc: dict[str, Any]) -> Samples | Observations:
        if "key" not in doc:
            return self._parse_record(doc)
        if self.model.window is None:
            raise PayloadError(
                f"key: keyed observations need a model with a window, "
                f"model {self.model.name!r} has none"
            )
        return self._parse_observation(doc)

    def _parse_observation(self, doc: dict[str, Any]) -> Observations:
        try:
            rec = _Observation.model_validate(doc)
        except ValidationError as exc:
            raise PayloadError(_reason(exc)) from None
        x = self._step(rec.x)
        y = np.full(1, np.nan, np.float32) if rec.y is None else self._check_targets([rec.y])
        return Observations((rec.key,), np.array([rec.seq], np.float64), x, y)

    def _step(self, raw_x: list[Any]) -> np.ndarray:
        """One step of a window, `inputs` numbers, as a (1, inputs) float32 array."""
        try:
            x = self._one_step.validate_python(raw_x)
        except ValidationError as exc:
            raise PayloadError(_reason(exc, "x")) from None
        if len(x) != self.model.inputs:
            raise PayloadError(
                f"x of a keyed observation must have shape [{self.model.inputs}] "
                f"(one step), got [{len(x)}]"
            )
        with np.errstate(over="ignore"):
            arr = np.asarray([x], dtype=np.float32)
        if not np.all(np.isfinite(arr)):
            raise PayloadError("x: value out of float32 range")
        return arr

    def _parse_record(self, doc: dict[str, Any]) -> Samples:
        columnar = isinstance(doc.get("y"), list)
        try:
            rec = (_Columnar if columnar else _Sample).model_validate(doc)
        except ValidationError as exc:
            raise PayloadError(_reason(exc)) from None
        try:
            x = (self._many if columnar else self._one).validate_python(rec.x)
        except ValidationError as exc:
            raise PayloadError(_reason(exc, "x")) from None
        x = self._to_array(x, batched=columnar)
        if columnar:
            y, ids = rec.y, rec.ids
            self._check_count(len(y))
            if len(y) != len(x):
                raise PayloadError(f"x has {len(x)} rows but y has {len(y)}")
            if ids is not None and len(ids) != len(y):
                raise PayloadError(f"ids has {len(ids)} entries but y has {len(y)}")
        else:
            y, ids = [rec.y], None if rec.id is None else [rec.id]
        return Samples(x, self._check_targets(y), None if ids is None else tuple(ids))

    def _check_count(self, n: int) -> None:
        limit = self.model.ingest.max_samples_per_message
        if n > limit:
            raise PayloadError(f"{n} samples exceed max_samples_per_message={limit}")

    def _check_targets(self, y: list[float]) -> np.ndarray:
        with np.errstate(over="ignore"):
            arr = np.asarray(y, dtype=np.float32)
        task = self.model.task
        if task == "binary" and not np.all((arr >= 0) & (arr <= 1)):
            raise PayloadError(f"y must be in [0, 1] for a binary model, got {y[:5]}")
        if task == "multiclass":
            classes = self.model.classes or 0
            if not np.all((arr == np.round(arr)) & (arr >= 0) & (arr < classes)):
                raise PayloadError(f"y must be a class index in 0..{classes - 1}, got {y[:5]}")
        if not np.all(np.isfinite(arr)):
            raise PayloadError("y: value out of float32 range")
        return arr

    def _to_array(self, x: list[Any], batched: bool) -> np.ndarray:
        try:
            with np.errstate(over="ignore"):
                arr = np.asarray(x, dtype=np.float32)
        except ValueError:
            raise PayloadError("x: rows of different lengths") from None
        got = arr.shape[1:] if batched else arr.shape
        if got != self.shape:
            want = "x" if not batched else "each row of x"
            raise PayloadError(f"{want} must have shape {list(self.shape)}, got {list(got)}")
        if not np.all(np.isfinite(arr)):
            raise PayloadError("x: value out of float32 range")
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


def concat_observations(parts: list[Observations]) -> Observations | None:
    """Join accepted observations into one, in order; None when there are none."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return Observations(
        tuple(k for p in parts for k in p.keys),
        np.concatenate([p.seq for p in parts]),
        np.concatenate([p.x for p in parts]),
        np.concatenate([p.y for p in parts]),
    )


def concat(parts: list[Samples]) -> Samples | None:
    """Join accepted samples into one; None when there are none."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    ids = None
    if any(p.ids is not None for p in parts):
        ids = tuple(i for p in parts for i in (p.ids or (None,) * len(p)))
    return Samples(np.concatenate([p.x for p in parts]), np.concatenate([p.y for p in parts]), ids)
