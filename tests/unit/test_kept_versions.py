"""`KeptVersions` without servers: leased models are never taken by a load, and what the
store lacks is refused from a cache until the announcements change."""

from __future__ import annotations

import time

import numpy as np
import pytest

from streamlearn.actor import runtimes
from streamlearn.actor.inbox import Pending
from streamlearn.actor.versions import KeptVersions
from streamlearn.config.app import ModelConfig
from streamlearn.errors import WeightsError
from streamlearn.online import codec

CFG = ModelConfig(name="u", inputs=2, task="regression", architecture="linear")
BUILD = runtimes.builder("numpy", (1,))


class Store:
    """The weights store's reads, counted: version v's every weight is v."""

    def __init__(self, versions: list[int]) -> None:
        spec = BUILD(CFG).spec
        self.blobs = {
            v: codec.encode({k: np.full(shape, v, dtype) for k, (shape, dtype) in spec.items()})
            for v in versions
        }
        self.reads = 0

    def fetch(self, version: int) -> tuple[int, bytes] | None:
        self.reads += 1
        return (version, self.blobs[version]) if version in self.blobs else None

    def versions(self) -> list[int]:
        self.reads += 1
        return sorted(self.blobs)

    def labels(self) -> dict[str, int]:
        self.reads += 1
        return {}


def request(version: int | str) -> Pending:
    return Pending(
        time.monotonic(), np.zeros((1, 2), np.float32), True, None, "t", None, version=version
    )


def value(model) -> float:
    return float(model.arrays["head/bias"][0])


@pytest.fixture
def kept():
    epoch = [0]
    store = Store([1, 2, 3])
    versions = KeptVersions(store, lambda _v: BUILD(CFG), lambda _m: None, 2, lambda: epoch[0])
    return versions, store, epoch


def split(versions: KeptVersions, *asked: int | str):
    refused: list[str] = []
    groups, misses = versions.split(
        [request(v) for v in asked], (9, "base"), 9, {}, lambda _p, why: refused.append(why)
    )
    return groups, misses, refused


def test_a_load_never_takes_a_model_a_batch_uses(kept):
    versions, _store, _ = kept
    assert versions.load(1, lambda: 0.0) == 1 and versions.load(2, lambda: 0.0) == 2
    groups, misses, _ = split(versions, 1, 2, 3)
    assert [g.version for g in groups if g.model is not None] == [1, 2]
    assert [p.version for p in misses] == [3]

    soon = time.monotonic() + 0.1
    assert versions.load(3, lambda: soon) is None, (
        "both models leased: the load waits, then gives up"
    )
    assert [value(g.model) for g in groups if g.model is not None] == [1.0, 2.0]

    versions.release(groups)
    assert versions.load(3, lambda: time.monotonic() + 1) == 3
    assert versions.kept() == [2, 3], "the least recently used one went"


def test_what_the_store_lacks_is_refused_from_the_cache_until_an_announcement(kept):
    versions, store, epoch = kept
    for ref, why in (
        (7, "version 7 is not kept; versions kept: [1, 2, 3]"),
        ("stable", "no version is labelled 'stable'"),
    ):
        with pytest.raises(WeightsError, match=why.replace("[", r"\[").replace("]", r"\]")):
            versions.load(ref, lambda: 0.0)
    reads = store.reads
    _, misses, refused = split(versions, 7, "stable", 7)
    assert misses == [] and len(refused) == 3 and store.reads == reads, "no store read"

    epoch[0] += 1  # a version or label announced
    _, misses, refused = split(versions, 7, "stable")
    assert [p.version for p in misses] == [7, "stable"] and refused == []
