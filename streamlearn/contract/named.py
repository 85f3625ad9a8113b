"""Named samples and requests: the JSON objects devices already publish.

A model with `inputs = ["temperature", "ENERGY.Power", ...]` takes flat (or nested, by
dotted name) objects of those fields plus its `target` field, instead of positional `x`:

- a field the model does not use is ignored and counted (`strict_fields`: a dead letter);
- a missing or `null` input becomes NaN, which the model's first layer imputes with its
  running mean (`streamlearn.online.standardize`); more than `max_missing` of the inputs
  missing is a dead letter `missing_field`;
- a categorical input's string becomes its index in the configured values (-1: unseen or
  missing), which the model one-hot encodes (`streamlearn.online.encode`), so an actor and
  `export` compute the same function as the learner;
- a boolean is 1 or 0 (as a category, the value "true" or "false"); a level of digits in
  a dotted name indexes an array (`streamlearn.online.paths`).

A message is one object, a list (`{"samples": [{...}, ...]}`, items judged one by one),
or columnar (every field a list, the target's too). For a model with a window an object is
one step of a device's sequence: its key is the `key` field or the source topic's level,
its seq the model's `seq_field` (a number, or an ISO 8601 time read as unix seconds) or the
arrival time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from streamlearn.config.app import ModelConfig
from streamlearn.config.inputs import MAX_CATEGORY_CHARS
from streamlearn.contract.records import FieldCounts, Observations, Request, Samples
from streamlearn.contract.schemas import request_id, version_ref
from streamlearn.contract.steps import StepKey, seq_of
from streamlearn.errors import PayloadError
from streamlearn.online.paths import Path, dig, path_of

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

_F32_MAX = float(np.finfo(np.float32).max)
# Fields of an object that are not inputs: the payload's own.
SAMPLE_FIELDS = frozenset(("id", "key", "seq"))
REQUEST_FIELDS = frozenset(("id", "key", "seq", "reply_to", "version"))
MIN_FIELD_LIMIT = 256  # an object may carry this many fields (or 4 per input) at most


class NamedFields:
    """Reads one model's named inputs out of decoded JSON objects.

    >>> from streamlearn.config import ModelConfig
    >>> m = ModelConfig(name="m", inputs=["t", "ENERGY.Power", "kind"], target="failed",
    ...                 task="binary", categorical={"kind": ["press", "lathe"]})
    >>> from streamlearn.contract.records import FieldCounts, Observations, Request, Samples
    >>> named, counts = NamedFields(m), FieldCounts()
    >>> named.row({"t": 20.5, "ENERGY": {"Power": 3}, "kind": "lathe", "failed": 1,
    ...            "rssi": -60}, counts, REQUEST_FIELDS), counts.extra
    (([20.5, 3.0, 1.0], 1), 1)
    >>> named.row({"t": None, "ENERGY": {"Power": 1}, "kind": "mill"}, counts, SAMPLE_FIELDS)[0]
    [nan, 1.0, -1.0]
    >>> dict(counts.missing), dict(counts.unseen)
    ({'t': 1}, {'kind': 1})
    >>> named.reading({"t": True, "kind": "press", "failed": 0}, counts)
    ({'t': 1.0, 'kind': 0.0}, 0)
    """

    def __init__(self, model: ModelConfig) -> None:
        assert model.fields is not None
        self.model = model
        self.names = list(model.fields)
        self.target = model.target.split(".")
        self.target_path = path_of(model.target)
        # per input: its name, its key (flat) or path (dotted), its categorical reader
        self.plan: list[tuple[str, str | Path, Callable[[Any], float | None] | None]] = []
        for name in self.names:
            values = model.categorical.get(name)
            key = name if "." not in name else path_of(name)
            self.plan.append((name, key, None if values is None else _category(name, values)))
        self.paths = [name.split(".") for name in self.names]
        self.tops = {p[0] for p in self.paths} | {self.target[0], model.seq_field.split(".")[0]}
        self.known = {own: frozenset(self.tops | own) for own in (SAMPLE_FIELDS, REQUEST_FIELDS)}
        self.max_missing = math.floor(model.max_missing * len(self.names) + 1e-9)
        self.field_limit = max(MIN_FIELD_LIMIT, 4 * len(self.names))

    def check_size(self, doc: dict[str, Any]) -> None:
        """Refuse an object of more fields than a device sends before reading any."""
        if len(doc) > self.field_limit:
            raise PayloadError(
                f"{len(doc)} fields, at most {self.field_limit} allowed", "unknown_field"
            )

    def row(
        self, doc: dict[str, Any], counts: FieldCounts, own: frozenset[str]
    ) -> tuple[list[float], Any]:
        """One object's inputs as a row (NaN: missing; categorical: the value's index) and
        its target's JSON value (None: absent); `own` are the payload's other fields."""
        self.check_size(doc)
        known = self.known.get(own) or frozenset(self.tops | own)
        extra = len(doc) - len(known & doc.keys())
        if extra:
            if self.model.strict_fields:
                unused = [k for k in doc if k not in known]
                shown = ", ".join(repr(k[:40]) for k in unused[:3])
                raise PayloadError(
                    f"fields the model does not use: {shown} (strict_fields)", "unknown_field"
                )
            counts.extra += extra
        x: list[float] = []
        missing: list[str] = []
        unseen: list[str] = []
        for name, key, category in self.plan:
            value = doc.get(key) if type(key) is str else dig(doc, key)  # type: ignore[arg-type]
            if value is None:
                missing.append(name)
                x.append(math.nan)
            elif category is None:
                kind = type(value)
                if (kind is float or kind is int) and -_F32_MAX <= value <= _F32_MAX:
                    x.append(float(value))
                elif kind is bool:
                    x.append(1.0 if value else 0.0)
                else:
                    raise _not_a_number(name, value)
            else:
                number = category(value)
                if number is None:
                    unseen.append(name)
                    number = -1.0
                x.append(number)
        if len(missing) > self.max_missing:
            raise PayloadError(
                f"{len(missing)} of {len(self.names)} inputs missing, at most "
                f"{self.max_missing} (max_missing): {missing[:5]}",
                "missing_field",
            )
        if missing or unseen:
            counts.add(
                FieldCounts(missing=dict.fromkeys(missing, 1), unseen=dict.fromkeys(unseen, 1))
            )
        y = doc.get(self.target[0]) if len(self.target) == 1 else dig(doc, self.target_path)
        return x, y

    def reading(self, doc: dict[str, Any], counts: FieldCounts) -> tuple[dict[str, float], Any]:
        """The inputs an object carries, by name (NaN: null, or a plain body's
        "unavailable"), and its target's JSON value (None: absent): a part of a sample
        that other messages complete (`streamlearn.ingest.assembly`). Inputs the object
        does not carry are not in it; fields the model does not use are counted."""
        self.check_size(doc)
        known = self.known[SAMPLE_FIELDS]
        counts.extra += len(doc) - len(known & doc.keys())
        values: dict[str, float] = {}
        for name, key, category in self.plan:
            if type(key) is str:
                if key not in doc:
                    continue
                value = doc[key]
            else:
                value = dig(doc, key)  # type: ignore[arg-type]
                if value is None and not _holds(doc, key):  # type: ignore[arg-type]
                    continue
            if value is None:
                values[name] = math.nan
            elif category is None:
                kind = type(value)
                if (kind is float or kind is int) and -_F32_MAX <= value <= _F32_MAX:
                    values[name] = float(value)
                elif kind is bool:
                    values[name] = 1.0 if value else 0.0
                else:
                    raise _not_a_number(name, value)
            else:
                number = category(value)
                if number is None:
                    counts.add(FieldCounts(unseen={name: 1}))
                values[name] = -1.0 if number is None else number
        y = doc.get(self.target[0]) if len(self.target) == 1 else dig(doc, self.target_path)
        return values, y

    def columns(self, doc: dict[str, Any]) -> list[dict[str, Any]] | None:
        """A columnar object (the target a list) as one object per row; None if not one.

        The row count is checked before any row is built: a message over it costs no more
        than its decoded JSON."""
        y = doc.get(self.target[0]) if len(self.target) == 1 else _dig(doc, self.target)
        if type(y) is not list:
            return None
        n, limit = len(y), self.model.ingest.max_samples_per_message
        if n > limit:
            raise PayloadError(
                f"{n} samples exceed max_samples_per_message={limit}", "too_many_samples"
            )
        rows: list[dict[str, Any]] = [{} for _ in range(n)]
        for path in [*self.paths, self.target, ["ids"]]:
            column = _dig(doc, path)
            if column is None:
                continue
            if type(column) is not list or len(column) != n:
                raise PayloadError(
                    f"{'.'.join(path)}: a columnar payload's fields are lists of {n} values",
                    "wrong_shape",
                )
            path = ["id"] if path == ["ids"] else path
            for row, value in zip(rows, column, strict=True):
                for part in path[:-1]:
                    row = row.setdefault(part, {})
                row[path[-1]] = value
        return rows


def _not_a_number(name: str, value: Any) -> PayloadError:
    if type(value) is float or type(value) is int:
        return PayloadError(f"{name}: value {value!r} out of float32 range", "non_finite")
    return PayloadError(f"{name}: a number expected, got {_shown(value)}", "wrong_type")


def _holds(doc: Any, path: Path) -> bool:
    """Whether a dotted name's last level is there (its value null), not absent."""
    parent = dig(doc, path[:-1]) if len(path) > 1 else doc
    key, index = path[-1]
    if isinstance(parent, dict):
        return key in parent
    return type(parent) is list and index is not None and index < len(parent)


def _dig(doc: Any, path: list[str]) -> Any:
    """A columnar payload's list at `path` (objects only: a column is not indexed)."""
    for part in path:
        if type(doc) is not dict:
            return doc.get(part) if isinstance(doc, dict) else None
        doc = doc.get(part)
        if doc is None:
            return None
    return doc


def _category(name: str, values: tuple[str, ...]) -> Callable[[Any], float | None]:
    index = {v: float(i) for i, v in enumerate(values)}

    def read(value: Any) -> float | None:
        if type(value) is bool:
            value = "true" if value else "false"
        elif type(value) is not str:
            raise PayloadError(
                f"{name}: a string (one of its values) expected, got {_shown(value)}",
                "wrong_type",
            )
        if len(value) > MAX_CATEGORY_CHARS:
            raise PayloadError(
                f"{name}: a value of {len(value)} characters, at most {MAX_CATEGORY_CHARS}",
                "bad_string",
            )
        return index.get(value)

    return read


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class NamedPayloads:
    """Named sample messages and requests of one model into records; the positional forms
    stay with `streamlearn.contract.payloads.PayloadParser`, which calls this."""

    def __init__(self, model: ModelConfig, check_targets: Callable[[list[float]], np.ndarray]):
        self.model = model
        self.fields = NamedFields(model)
        self.check_targets = check_targets

    def item(
        self, doc: dict[str, Any], counts: FieldCounts, key: StepKey, at: float | None
    ) -> Samples | Observations | None:
        """One object: a sample, a keyed step (window models), or None when it has no
        label and no window to extend (counted as unlabeled)."""
        x, y = self.fields.row(doc, counts, SAMPLE_FIELDS)
        if self.model.window is not None:
            step_key = key.of(doc.get("key"))
            seq = seq_of(self._order(doc), at)
            target = math.nan if y is None else self.target_of(y)
            return Observations(
                (step_key,),
                np.array([seq], np.float64),
                np.array([x], np.float32),
                np.array([target], np.float32),
            )
        if y is None:
            counts.unlabeled += 1
            return None
        rid = doc.get("id")
        return Samples(
            np.array([x], np.float32),
            np.array([self.target_of(y)], np.float32),
            None if rid is None else (_sample_id(rid),),
        )

    def rows(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """The objects a message holds: columnar or single (the list form is the caller's)."""
        self.fields.check_size(doc)
        return self.fields.columns(doc) or [doc]

    def request(self, doc: dict[str, Any], sender: StepKey) -> Request:
        """A named request: one object, or `{"samples": [...]}` for several rows; a
        key-only one of a key its `sender` may read."""
        counts = FieldCounts()
        own = REQUEST_FIELDS | {"samples"}
        items = doc.get("samples")
        if items is not None:
            if type(items) is not list or not items or any(type(i) is not dict for i in items):
                raise PayloadError("samples: a non-empty list of objects expected", "wrong_type")
            if len(items) > self.model.ingest.max_samples_per_message:
                raise PayloadError(
                    f"{len(items)} rows exceed max_samples_per_message="
                    f"{self.model.ingest.max_samples_per_message}",
                    "too_many_samples",
                )
            self.fields.check_size(doc)
            rows = []
            for i, item in enumerate(items):
                try:
                    rows.append(self.fields.row(item, counts, own)[0])
                except PayloadError as exc:
                    raise PayloadError(f"samples.{i}: {exc}", exc.kind) from None
            x, batched = np.asarray(rows, dtype=np.float32), True
        else:
            x, batched = np.asarray([self.fields.row(doc, counts, own)[0]], np.float32), False
        rid, reply_to = request_id(doc.get("id")), doc.get("reply_to")
        if reply_to is not None and not (
            type(reply_to) is str and 0 < len(reply_to) <= 512 and not set(reply_to) & {"#", "+"}
        ):
            raise PayloadError(f"reply_to: a topic without wildcards, got {_shown(reply_to)}")
        version = version_ref(doc.get("version"))
        if "key" in doc and self.model.window is not None:
            seq = self._order(doc)
            seq = None if seq is None else seq_of(seq, None)
            key = sender.of(doc["key"])
            return Request(x[:1], False, rid, reply_to, key=key, seq=seq, version=version)
        return Request(x, batched, rid, reply_to, version=version)

    def _order(self, doc: dict[str, Any]) -> Any:
        """A step's order: its `seq_field` (`seq` unless the model names another)."""
        name = self.model.seq_field
        return doc.get(name) if "." not in name else dig(doc, path_of(name))

    def target_of(self, y: Any) -> float:
        """A label's JSON value as the task takes it (a boolean of a binary model 0 or 1),
        checked as `PayloadParser.check_targets` does; PayloadError naming the rule."""
        if type(y) is bool and self.model.task == "binary":
            y = int(y)
        if type(y) is not int and type(y) is not float:
            raise PayloadError(
                f"{self.model.target}: a number expected, got {_shown(y)}", "wrong_type"
            )
        task = self.model.task
        if (task == "binary" and 0 <= y <= 1) or (
            task == "regression" and -_F32_MAX <= y <= _F32_MAX
        ):
            return float(y)
        if task == "multiclass" and y == int(y) and 0 <= y < (self.model.classes or 0):
            return float(y)
        return float(self.check_targets([y])[0])  # raises, with the reason


def _sample_id(value: Any) -> str:
    if type(value) is str and 1 <= len(value) <= 256 and not _CONTROL.search(value):
        return value
    raise PayloadError(
        f"id: a string of 1 to 256 characters, no control characters, got {_shown(value)}",
        "bad_string",
    )
