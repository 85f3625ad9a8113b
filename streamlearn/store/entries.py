"""The samples stream's entries as Python sees them: an entry's fields unpacked
(`unpack`, the Python side of `lua/entry.lua`), an entry read (`Entry`), and a read's
entries packed into arrays (`Packed`, what `lua/stream_read.lua` returns)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from streamlearn.contract.records import Samples


def unpack(fields: dict[bytes, bytes], sample_shape: tuple[int, ...]) -> Samples:
    """The samples of an entry, as `lua/entry.lua` writes it: `n` samples, `x` and `y` as
    float32 bytes, `ids` a JSON list when the samples have ids (`c`, the running sample
    count, is for the backlog script)."""
    n = int(fields[b"n"])
    x = np.frombuffer(fields[b"x"], dtype=np.float32).reshape((n, *sample_shape))
    y = np.frombuffer(fields[b"y"], dtype=np.float32)
    ids = tuple(json.loads(fields[b"ids"])) if b"ids" in fields else None
    return Samples(x, y, ids)


@dataclass(frozen=True)
class Entry:
    """One stream entry: its id and the samples it carries.

    `error` says why an entry holds no usable samples (undecodable, or deleted while
    pending): the learner dead-letters and acknowledges it instead of training on it.
    """

    id: bytes
    samples: Samples
    error: str | None = None


@dataclass(frozen=True)
class Packed:
    """Entries of one read, their samples concatenated: entry i holds rows
    `ends[i-1]:ends[i]`. `unusable` are (id, reason) of entries with no usable samples."""

    ids: list[bytes]
    ends: np.ndarray
    x: np.ndarray
    y: np.ndarray
    unusable: list[tuple[bytes, str]]

    def __len__(self) -> int:
        return len(self.ids) + len(self.unusable)

    @classmethod
    def of(cls, entries: list[Entry], sample_shape: tuple[int, ...]) -> Packed:
        good = [e for e in entries if e.error is None and len(e.samples.x) == len(e.samples.y)]
        unusable = [
            (e.id, e.error or f"entry has {len(e.samples.x)} x rows, {len(e.samples.y)} y")
            for e in entries
            if e.error is not None or len(e.samples.x) != len(e.samples.y)
        ]
        if not good:
            return cls.empty(sample_shape, unusable)
        return cls(
            [e.id for e in good],
            np.cumsum([len(e.samples.y) for e in good]),
            np.concatenate([e.samples.x for e in good]),
            np.concatenate([e.samples.y for e in good]),
            unusable,
        )

    @classmethod
    def empty(cls, sample_shape: tuple[int, ...], unusable: list | None = None) -> Packed:
        nothing = np.zeros(0, np.int64)
        x = np.zeros((0, *sample_shape), np.float32)
        return cls([], nothing, x, np.zeros(0, np.float32), unusable or [])


def stream_id(value: bytes | str) -> tuple[int, int]:
    ms, seq = (value.decode() if isinstance(value, bytes) else value).split("-")
    return int(ms), int(seq)
