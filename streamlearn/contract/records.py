"""What a parsed message becomes: the records that ingest stores and the actor serves.

`streamlearn.contract.payloads` makes them from MQTT payloads; the storage modules (`stream`,
`appends`, `windows`, `writes`) and the learner's batching take them without depending on
the parser. Arrays are float32 (`Observations.seq` float64), one row per sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal, NamedTuple

import numpy as np
from pydantic import Field

# A sample's id, what de-duplication keys on (`streamlearn.store.appends`). No control
# characters: the ids the service scopes to a sender start with one (`names.sample_id`).
SampleId = Annotated[
    str, Field(strict=True, min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")
]
# Why a message was rejected, in a word: a dead letter's `kind` and the label ingest's
# metrics count dead letters by. Named where the rejection is made, never read from its text.
Kind = Literal[
    "invalid_json",
    "oversize",
    "wrong_shape",
    "wrong_type",
    "non_finite",
    "unknown_field",
    "missing_field",
    "bad_target",
    "bad_string",
    "out_of_range",
    "too_many_samples",
    "too_many_keys",
    "wrong_key",
    "no_window",
    "unknown_id",
    "redis_refused",
    "bad_sparkplug",
    "other",
]
# What each kind means and what to do about it: the troubleshooting page's dead letters
# (docs/gen_troubleshooting.py). A dead letter is an entry of the model's `deadletter`
# stream in Redis (`reason`, `kind`, `source`, the payload's first bytes), counted by
# ingest's `deadletters_total{reason=KIND}`; its `reason` says which item and value.
DEAD_LETTERS: dict[Kind, tuple[str, str]] = {
    "invalid_json": (
        "the payload is not JSON (or nested too deeply)",
        "send one JSON object per message, UTF-8; `reason` holds the parser's words",
    ),
    "oversize": (
        "the payload is larger than `ingest.max_payload_bytes`",
        "send fewer samples per message, or raise `ingest.max_payload_bytes`",
    ),
    "wrong_shape": (
        "`x` does not have the model's shape (`inputs` numbers, or `[window][inputs]`), or "
        "`x`, `y` and `ids` differ in length",
        "send what the config declares: `streamlearn init` on a CSV of the stream writes it",
    ),
    "wrong_type": (
        "a value of the wrong JSON type: a payload that is not an object, a string where a "
        "number belongs",
        'send numbers as JSON numbers (`88.0`, not `"88.0"`), each message an object',
    ),
    "non_finite": (
        "a number out of float32 range, NaN or infinite",
        "filter the sensor's overflow at the device; a named sample may leave a missing "
        "input out instead (`max_missing`)",
    ),
    "unknown_field": (
        "a field the message format does not have, too many fields, or (with "
        "`strict_fields = true`) a field the model does not use",
        "drop the field at the sender, or set `strict_fields = false` to ignore such fields "
        "(counted by `extra_fields_total`)",
    ),
    "missing_field": (
        "a required field is missing: `x` or `y`, a keyed step's `seq`, or more than "
        "`max_missing` of a named sample's inputs",
        "send the field; for named samples, check the names against `fields` in the config",
    ),
    "bad_target": (
        "`y` is out of the task's range: `[0, 1]` for `binary`, a class index "
        "`0..classes-1` for `multiclass`",
        "check the model's `task` and `classes` against the labels the devices send",
    ),
    "bad_string": (
        "an id, key or categorical value that is not a valid string: too long, control "
        "characters, whitespace in a key",
        "send ids of 1 to 256 characters, keys of 1 to 128 without whitespace, no control "
        "characters in either",
    ),
    "out_of_range": (
        "a number past its bound: a keyed step's `seq` more than "
        "`ingest.window_max_seq_jump` ahead of its key's newest, or an integer out of range",
        "check the device's sequence or clock; raise `ingest.window_max_seq_jump` if its "
        "unit is finer than it allows",
    ),
    "too_many_samples": (
        "more samples in one message than `ingest.max_samples_per_message`",
        "split the message, or raise `ingest.max_samples_per_message`",
    ),
    "too_many_keys": (
        "a message naming more than `ingest.max_keys_per_message` device keys, or a sender "
        "making more than `ingest.max_keys_per_sender` windows (`assembly.max_keys_per_sender` "
        "held keys)",
        "publish each device on its own `samples/{client}` topic, or raise the limit",
    ),
    "wrong_key": (
        "a step on `samples/{client}` names a key other than its sender's own",
        "let each device name its own key; a gateway's keys are granted by "
        "`[models.NAME.gateways]`, a source's by `key_from_payload = true`",
    ),
    "no_window": (
        "a keyed observation (with `key`) for a model without a `window`",
        "set the model's `window` (an `lstm` or `conv1d` model), or send whole samples",
    ),
    "unknown_id": (
        "a label whose id matches no kept prediction: never served, expired "
        "(`labels.ttl_s`), evicted, or asked by another client",
        "publish a label on `labels/{client}` for a prediction asked on `predict/{client}` "
        "(bare `labels` for bare `predict`; over HTTP, the labels route), within "
        "`labels.ttl_s`",
    ),
    "redis_refused": (
        "Redis refused to store the message for good: full (`maxmemory`), or an error that "
        "would repeat",
        "make room in Redis (Troubleshooting, *Redis*); the message was acknowledged, not retried",
    ),
    "bad_sparkplug": (
        "a message on a Sparkplug B topic (`spBv1.0/...`) whose payload is not a Sparkplug B "
        "protobuf payload, has more metrics than a payload may (2,048), or a seq past 255",
        "check the edge node's Sparkplug B library and version; split a birth of more "
        "metrics into devices",
    ),
    "other": (
        "any other rejection; with `source` `learner`, the samples of a step the learner "
        "undid (a non-finite loss) or stream entries it could not read",
        "read the dead letter's `reason`; for the learner's, see `rollbacks_total`",
    ),
}


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
    """A rejected message (or its rejected items) and why; `kind` labels the reason."""

    reason: str
    payload: bytes
    kind: Kind = "other"


@dataclass
class FieldCounts:
    """What named messages held besides their inputs: fields ignored, inputs missing and
    categorical values not configured, by field; and unlabeled samples (no target)."""

    extra: int = 0
    missing: dict[str, int] = field(default_factory=dict)
    unseen: dict[str, int] = field(default_factory=dict)
    unlabeled: int = 0

    def add(self, other: FieldCounts) -> None:
        self.extra += other.extra
        _add(self.missing, other.missing)
        _add(self.unseen, other.unseen)
        self.unlabeled += other.unlabeled

    def __bool__(self) -> bool:
        return bool(self.extra or self.missing or self.unseen or self.unlabeled)


def _add(counts: dict[str, int], more: dict[str, int] | list[str]) -> None:
    for name in more:
        counts[name] = counts.get(name, 0) + (more[name] if isinstance(more, dict) else 1)


class Parsed(NamedTuple):
    """What a samples message holds: whole samples, keyed observations, rejected parts;
    for named payloads, what they held besides their inputs."""

    samples: Samples | None
    observations: Observations | None
    rejections: list[Rejection]
    fields: FieldCounts | None = None


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
    version: int | str | None = None  # asked for: a version or a label; None: the served one


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
