"""The positional payloads' schemas (pydantic, strict) and how their errors read.

`streamlearn.contract.payloads` validates with them; a validation error becomes a
`PayloadError` whose message names the field and whose kind labels the dead letter.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from streamlearn.contract.records import Kind, SampleId
from streamlearn.errors import PayloadError

Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
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
# A request's id: a string of 1 to 256 characters, or an integer every JSON parser reads
# exactly (JavaScript's safe integers). Its prediction is kept under it (§2.8): bounded,
# so that a kept prediction's key is too.
MAX_ID_CHARS = 256
MAX_ID_INT = 2**53 - 1
ID_RULE = f"a string of 1 to {MAX_ID_CHARS} characters or an integer within ±(2**53 - 1)"
# A version label (`streamlearn pin --label`): `stable`, `canary-2`.
LABEL = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
# Reasons of rejected items a message's one dead letter lists (with their indexes).
LISTED_REASONS = 5


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SampleDoc(Strict):
    x: list[Any]
    y: Finite
    id: SampleId | None = None


class ColumnarDoc(Strict):
    x: list[Any] = Field(min_length=1)
    y: list[Finite] = Field(min_length=1)
    ids: list[SampleId] | None = None


class SampleListDoc(Strict):
    samples: list[Any] = Field(min_length=1)


class ObservationDoc(Strict):
    key: WindowKey
    seq: Seq
    x: list[Any]
    y: Finite | None = None


class RequestDoc(Strict):
    x: list[Any] = Field(min_length=1)
    id: Any = None  # `request_id`
    reply_to: Topic | None = None
    version: Any = None  # `version_ref`


def version_ref(value: Any) -> int | str | None:
    """A request's `version`: a version number, or a label (`"stable"`, `"latest"`).

    >>> version_ref(12), version_ref("stable"), version_ref("12"), version_ref(None)
    (12, 'stable', 12, None)
    >>> version_ref(0)
    Traceback (most recent call last):
    ...
    streamlearn.errors.PayloadError: version: a version number (1 or more) or a label, got 0
    """
    if value is None:
        return None
    if type(value) is str and value.isdigit() and len(value) <= 18:
        value = int(value)
    if (type(value) is int and 1 <= value < 2**63) or (
        type(value) is str and LABEL.fullmatch(value)
    ):
        return value
    shown = repr(value)[:40]
    raise PayloadError(f"version: a version number (1 or more) or a label, got {shown}")


def request_id(value: Any, integers: bool = True) -> str | int | None:
    """A request's id, the same over both doors (the HTTP door's, `integers=False`, is a
    string in its protocol); PayloadError naming the rule for anything else.

    >>> request_id("r-1"), request_id(-7), request_id(None)
    ('r-1', -7, None)
    >>> request_id(10**30)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    streamlearn.errors.PayloadError: id: a string of 1 to 256 characters or an integer ...
    """
    if value is None or (type(value) is str and 1 <= len(value) <= MAX_ID_CHARS):
        return value
    if integers and type(value) is int and -MAX_ID_INT <= value <= MAX_ID_INT:
        return value
    if type(value) is int and value.bit_length() > 128:  # not spelled out: 4,300 digits
        shown = f"an integer of {value.bit_length()} bits"
    else:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    rule = ID_RULE if integers else f"a string of 1 to {MAX_ID_CHARS} characters"
    kind: Kind = "bad_string" if type(value) is str else "wrong_type"
    kind = "out_of_range" if type(value) is int else kind
    raise PayloadError(f"id: {rule}, got {shown}", kind)


class KeyedRequestDoc(RequestDoc):
    key: WindowKey
    seq: Seq | None = None


def nested(depth: int) -> TypeAdapter[Any]:
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


def invalid(exc: ValidationError, root: str = "") -> PayloadError:
    """The PayloadError of pydantic's first error, with its kind."""
    return PayloadError(reason(exc, root), _KINDS.get(exc.errors()[0]["type"], "other"))


def check_fields(doc: dict[str, Any]) -> None:
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


def reason(exc: ValidationError, root: str = "") -> str:
    err = exc.errors()[0]
    loc = ".".join([root, *(str(p) for p in err["loc"])]).strip(".")
    value = repr(err.get("input"))
    value = value if len(value) <= 40 else value[:37] + "..."
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{loc}: {err['msg']}, got {value}{more}" if loc else f"{err['msg']}{more}"


def decode(raw: bytes, limit: int) -> dict[str, Any]:
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
