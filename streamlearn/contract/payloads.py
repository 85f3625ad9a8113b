"""Parsing and validation of MQTT payloads (samples and prediction requests).

Pure functions of bytes: no I/O, no Keras, so ingest stays light. What is valid becomes
the records of `streamlearn.contract.records`; anything invalid raises `PayloadError` whose message
is the reason a user sees (dead letter or error reply). The common, fully valid sample
messages take a one-pass path first (`streamlearn.contract.fastparse`); a model with named
inputs takes JSON objects of named fields (`streamlearn.contract.named`). The positional
schemas are in `streamlearn.contract.schemas`.

A model with a `window` also takes keyed observations: `{"key": .., "seq": .., "x": [F
numbers], "y"?: ..}`, one step of one device's sequence, from which the service builds
that device's windows itself (`streamlearn.store.windows`); and key-only prediction requests
`{"key": .., "x": [F numbers], "seq"?: ..}` whose earlier steps come from the same store.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, cast

import numpy as np
from pydantic import ValidationError
from pydantic_core import from_json

from streamlearn.config.app import ModelConfig
from streamlearn.contract.decoding import RequestDecoder
from streamlearn.contract.fastparse import FastSamples
from streamlearn.contract.named import NamedPayloads
from streamlearn.contract.plain import plain_object
from streamlearn.contract.records import (
    FieldCounts,
    Kind,
    Observations,
    Parsed,
    Rejection,
    Request,
    Samples,
    concat,
    concat_observations,
)
from streamlearn.contract.schemas import (
    LISTED_REASONS,
    ColumnarDoc,
    KeyedRequestDoc,
    ObservationDoc,
    RequestDoc,
    SampleDoc,
    SampleListDoc,
    check_fields,
    decode,
    invalid,
    nested,
    reason,
    request_id,
    version_ref,
)
from streamlearn.contract.steps import StepKey
from streamlearn.errors import PayloadError


class PayloadParser:
    """Validates payloads against one model's input shape and task.

    `fast=False` turns off the one-pass path for the common valid payloads, leaving the
    reference path alone (the property tests compare the two).
    """

    def __init__(self, model: ModelConfig, fast: bool = True) -> None:
        self.model = model
        self.shape = model.sample_shape
        self._one = nested(len(self.shape))
        self._one_step = nested(1)
        self._many = nested(len(self.shape) + 1)
        self._fast = FastSamples(model) if fast and model.fields is None else None
        self._named = None if model.fields is None else NamedPayloads(model, self.check_targets)
        self.requests = RequestDecoder(model, None if self._named is None else self._named.fields)

    # -- samples -------------------------------------------------------------------------

    def parse_message(
        self,
        raw: bytes,
        key: str | None = None,
        at: float | None = None,
        key_from_payload: bool = False,
        granted: Collection[str] = (),
        field: str | None = None,
    ) -> Parsed:
        """Split a samples message into what is accepted and what is rejected.

        A `{"samples": [...]}` list is judged item by item, so one bad sample does not
        hold back the good ones beside it; a single or columnar payload is judged whole.
        `key` is the device key of the source topic the message came on: a window model's
        step is that key's, and one naming another key is refused (`wrong_key`), unless
        `key_from_payload` (then a step's own `key` comes first) or it is one of `granted`
        (a gateway's keys; "*": any). For named payloads
        (`streamlearn.contract.named`), `at` is the arrival (unix s): a step without its own
        `key` and `seq` fields takes the topic's key and `at`; `field` names the input of a
        plain value's body (`streamlearn.contract.plain`).
        """
        if self._fast is not None and len(raw) <= self.model.ingest.max_payload_bytes:
            samples = self._fast.parse(raw)
            if samples is not None:
                return Parsed(samples, None, [])
        counts = FieldCounts() if self._named is not None else None
        step = StepKey(key, key_from_payload, frozenset(granted))
        try:
            doc = self.reading(raw, field) if field is not None else None
            doc = doc or (self._decode_named(raw) if self._named is not None else None)
            doc = doc or decode(raw, self.model.ingest.max_payload_bytes)
            if self._named is not None and not _positional(doc):
                assert counts is not None  # made above for every named model
                return self._parse_named(doc, raw, counts, step, at)
            check_fields(doc)
            if "samples" in doc:
                return self._parse_list(doc, raw, lambda item: self._parse_item(item, step))
            item = self._parse_item(doc, step)
        except PayloadError as exc:
            return Parsed(None, None, [Rejection(str(exc), raw, cast(Kind, exc.kind))], counts)
        if isinstance(item, Observations):
            return Parsed(None, item, [])
        return Parsed(item, None, [])

    def reading(self, raw: bytes, field: str | None = None) -> dict[str, Any]:
        """A named model's message as its object: a plain value as `{field: value}`
        (`field` given), else the JSON object; PayloadError naming why not."""
        limit = self.model.ingest.max_payload_bytes
        if field is not None:
            return plain_object(raw, field, limit, field in self.model.categorical)
        return self._decode_named(raw) or decode(raw, limit)

    def _decode_named(self, raw: bytes) -> dict[str, Any] | None:
        """The object, decoded by pydantic's parser (faster than `json`); None: let
        `decode` judge it and say why."""
        if len(raw) > self.model.ingest.max_payload_bytes:
            return None
        try:
            doc = from_json(raw)
        except ValueError:
            return None
        return doc if type(doc) is dict and doc else None

    def _parse_named(
        self,
        doc: dict[str, Any],
        raw: bytes,
        counts: FieldCounts,
        step: StepKey,
        at: float | None,
    ) -> Parsed:
        """A named object, its columnar form (judged whole) or a list of objects."""
        named = self._named
        assert named is not None
        if "samples" in doc:
            return self._parse_list(
                doc,
                raw,
                lambda item: named.item(item, counts, step, at),
                counts,
                named.fields.target[0],
            )
        rows = named.rows(doc)
        if rows[0] is doc:  # one object: the common message
            item = named.item(doc, counts, step, at)
            if isinstance(item, Observations):
                return Parsed(None, item, [], counts)
            return Parsed(item, None, [], counts)
        self._check_count(len(rows))
        items = [named.item(row, counts, step, at) for row in rows]
        return Parsed(
            concat([i for i in items if isinstance(i, Samples)]),
            concat_observations([i for i in items if isinstance(i, Observations)]),
            [],
            counts,
        )

    def _parse_list(
        self,
        doc: dict[str, Any],
        raw: bytes,
        parse_item: Callable[[dict[str, Any]], Samples | Observations | None],
        counts: FieldCounts | None = None,
        target: str = "y",
    ) -> Parsed:
        """Items are judged one by one; the rejected ones make one dead letter together
        (a message of 10,000 bad items must not flush the capped dead-letter stream)."""
        try:
            items = SampleListDoc.model_validate(doc).samples
        except ValidationError as exc:
            raise invalid(exc) from None
        self._check_count(len(items))
        good: list[Samples] = []
        seen: list[Observations] = []
        bad: list[tuple[int, PayloadError]] = []  # the first LISTED_REASONS
        rejected = 0
        keys: set[str] = set()
        for i, item in enumerate(items):
            try:
                if not isinstance(item, dict) or isinstance(item.get(target), list):
                    form = "{x, y, id?}" if counts is None else f"{{inputs..., {target}}}"
                    raise PayloadError(f"must be one sample object {form}", "wrong_type")
                if counts is None:
                    check_fields(item)
                parsed = parse_item(item)
                if isinstance(parsed, Observations):
                    self._count_key(parsed.keys[0], keys)
            except PayloadError as exc:
                rejected += 1
                if len(bad) < LISTED_REASONS:
                    bad.append((i, exc))
                continue
            if parsed is not None:
                (seen if isinstance(parsed, Observations) else good).append(parsed)  # type: ignore[arg-type]
        if not rejected:
            return Parsed(concat(good), concat_observations(seen), [], counts)
        listed = "; ".join(f"samples.{i}: {exc}" for i, exc in bad)
        more = f"and {rejected - len(bad)} more; " if rejected > len(bad) else ""
        reason = f"{listed} ({more}{rejected} of {len(items)} samples rejected)"
        summary = Rejection(reason, raw, cast(Kind, bad[0][1].kind))
        return Parsed(concat(good), concat_observations(seen), [summary], counts)

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

    def _parse_item(self, doc: dict[str, Any], step: StepKey) -> Samples | Observations:
        if "key" not in doc:
            return self._parse_record(doc)
        if self.model.window is None:
            raise PayloadError(
                f"key: keyed observations need a model with a window, "
                f"model {self.model.name!r} has none",
                "no_window",
            )
        return self._parse_observation(doc, step)

    def _parse_observation(self, doc: dict[str, Any], step: StepKey) -> Observations:
        try:
            rec = ObservationDoc.model_validate(doc)
        except ValidationError as exc:
            raise invalid(exc) from None
        key = step.of(rec.key)
        x = self._step(rec.x)
        y = np.full(1, np.nan, np.float32) if rec.y is None else self.check_targets([rec.y])
        return Observations((key,), np.array([rec.seq], np.float64), x, y)

    def _step(self, raw_x: list[Any]) -> np.ndarray:
        """One step of a window, `inputs` numbers, as a (1, inputs) float32 array."""
        try:
            x = self._one_step.validate_python(raw_x)
        except ValidationError as exc:
            raise invalid(exc, "x") from None
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
            rec: Any = (ColumnarDoc if columnar else SampleDoc).model_validate(doc)
        except ValidationError as exc:
            raise invalid(exc) from None
        try:
            x = (self._many if columnar else self._one).validate_python(rec.x)
        except ValidationError as exc:
            raise invalid(exc, "x") from None
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
        return Samples(x, self.check_targets(y), None if ids is None else tuple(ids))

    def _check_count(self, n: int) -> None:
        limit = self.model.ingest.max_samples_per_message
        if n > limit:
            raise PayloadError(
                f"{n} samples exceed max_samples_per_message={limit}", "too_many_samples"
            )

    def check_targets(self, y: list[float]) -> np.ndarray:
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
        if not np.isfinite(arr).all():
            raise PayloadError("x: value out of float32 range", "non_finite")
        return arr if batched else arr[None]

    def owned_by(self, client: str) -> StepKey:
        """The keys `client` (the level of `samples/{client}`, `predict/{client}`) may name."""
        return StepKey(client, granted=frozenset(self.model.gateways.get(client, ())))

    # -- prediction requests -------------------------------------------------------------

    def parse_request(self, raw: bytes | dict[str, Any], client: str | None = None) -> Request:
        """Validate a prediction request; one sample or a batch of rows. `raw` may be the
        JSON object already decoded (the actor decodes once, with `self.requests`, to
        route its reply); its bytes are decoded by that same decoder.

        Its rows are counted before they are validated: at most `max_request_rows`.
        `client` is the requester's level of `predict/{client}`: a key-only request from it
        may name only that key, its own, or one its `[models.NAME.gateways]` entry grants
        (`StepKey`); a request on bare `predict` (`client` None) any.
        """
        doc = raw if isinstance(raw, dict) else self.requests.decode(raw)
        depth = _depth(doc.get("x"))  # a batch nests deeper than one sample
        batched = depth > len(self.shape)
        limit = self.model.actor.max_request_rows
        if batched and len(doc["x"]) > limit:
            raise PayloadError(f"x: {len(doc['x'])} rows, more than max_request_rows={limit}")
        own = StepKey() if client is None else self.owned_by(client)
        if self._named is not None and not _positional(doc):
            return self._named.request(doc, own)
        if "key" in doc:
            return self._parse_keyed_request(doc, own)
        try:
            req = RequestDoc.model_validate(doc)
        except ValidationError as exc:
            raise PayloadError(reason(exc)) from None
        try:
            x = (self._many if batched else self._one).validate_python(req.x)
        except ValidationError as exc:
            raise PayloadError(reason(exc, "x")) from None
        x = self._to_array(x, batched)
        rid, version = request_id(req.id), version_ref(req.version)
        return Request(x, batched, rid, req.reply_to, version=version)

    def _parse_keyed_request(self, doc: dict[str, Any], own: StepKey) -> Request:
        if self.model.window is None:
            raise PayloadError(
                f"key: key-only requests need a model with a window, "
                f"model {self.model.name!r} has none"
            )
        try:
            req = KeyedRequestDoc.model_validate(doc)
        except ValidationError as exc:
            raise PayloadError(reason(exc)) from None
        key = own.of(req.key)
        x, rid, version = self._step(req.x), request_id(req.id), version_ref(req.version)
        return Request(x, False, rid, req.reply_to, key=key, seq=req.seq, version=version)


def _positional(doc: dict[str, Any]) -> bool:
    """Whether a named model's message is in the positional form (`x`) all the same."""
    items = doc.get("samples")
    if "x" in doc:
        return True
    return type(items) is list and bool(items) and type(items[0]) is dict and "x" in items[0]


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, list) and value:
        depth, value = depth + 1, value[0]
    return depth
