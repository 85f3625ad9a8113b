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
    "other",
]


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
