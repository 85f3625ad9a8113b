"""`[models.NAME.assembly]`: samples assembled from several topics of one device or site.

Devices often publish one value per topic (Home Assistant's statestream, Zigbee2MQTT's
attribute mode). With this table set, ingest holds the last value of each named input per
device key in Redis (`streamlearn.store.held`), each for at most its age limit, and forms
a sample when the label arrives (the model's `target`) or every `every_s`
(`streamlearn.ingest.assembly`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field

from streamlearn.config.inputs import FieldName
from streamlearn.config.policies import Frozen

MAX_AGE_S = 30 * 86_400  # an age limit, at most
# Redis memory of one held key, in bytes: a hash of a value and its time per input and
# the target, and its last label's digest, id and seq (`streamlearn.store.held`).
KEY_BYTES = 160
FIELD_BYTES = 64


def held_bytes(inputs: int) -> int:
    """About the Redis memory one held key of a model of `inputs` inputs takes.

    >>> held_bytes(4)
    480
    """
    return KEY_BYTES + FIELD_BYTES * (inputs + 1)


class AssemblyConfig(Frozen):
    """How a model's samples are assembled from readings on several topics.

    A held key takes about `held_bytes(inputs)` bytes (160 + 64 per input and the target;
    480 B with 4 inputs), so the held state is at most `max_devices` times that (4.8 MB
    with the defaults and 4 inputs), plus the key index (~100 B per key).
    """

    # the reference's example needs a model of named inputs (`config.tables.examples`)
    EXAMPLE_MODEL: ClassVar[dict[str, Any]] = {"inputs": ["temperature", "humidity", "door"]}

    max_age_s: float = Field(
        600,
        gt=0,
        le=MAX_AGE_S,
        description="an input's held value older than this many seconds at formation counts "
        "as missing (the target's too: a periodic sample needs a fresh one)",
    )
    max_age_s_of: dict[FieldName, float] = Field(
        {},
        examples=[{"door": 86400}],
        description="age limits of single inputs (or the target), in seconds, by name; the "
        "others take max_age_s",
    )
    every_s: float | None = Field(
        None,
        ge=0.1,
        le=MAX_AGE_S,
        description="form a sample of every held key with a fresh target each period of this "
        "many seconds (its id: the key and the period); unset: only when a label arrives",
    )
    ttl_s: int = Field(
        3600,
        ge=1,
        le=MAX_AGE_S,
        description="a key's held values, and its last label (what tells a redelivery), "
        "expire after this many seconds without a reading",
    )
    max_devices: int = Field(
        10_000,
        ge=1,
        le=10_000_000,
        description="keys held, at most (each about 160 + 64 x (inputs + 1) bytes of Redis); "
        "past it a sender's new key evicts its own idlest while it holds others, its first "
        "the idlest of all",
    )
    max_keys_per_sender: int = Field(
        1000,
        ge=1,
        le=10_000_000,
        description="keys one sender (the topic a reading came on) may make; readings of "
        "further new keys from it are dead letters (too_many_keys)",
    )

    def check(self, fields: Sequence[str] | None, target: str) -> None:
        """Assembly reads named inputs; its per-input limits name them or the target.

        >>> AssemblyConfig(max_age_s_of={"t": 5}).check(["t"], "y")
        >>> AssemblyConfig(max_age_s_of={"u": 5}).check(["t"], "y")
        Traceback (most recent call last):
        ...
        ValueError: assembly.max_age_s_of: 'u' is not an input or the target, ['t', 'y']
        """
        if fields is None:
            raise ValueError("assembly: only for named inputs (inputs = [names])")
        for name, age in self.max_age_s_of.items():
            if name not in fields and name != target:
                known = [*fields, target]
                raise ValueError(
                    f"assembly.max_age_s_of: {name!r} is not an input or the target, {known}"
                )
            if not 0 < age <= MAX_AGE_S:
                raise ValueError(
                    f"assembly.max_age_s_of.{name}: seconds in (0, {MAX_AGE_S}], got {age}"
                )

    def max_age(self, name: str) -> float:
        """The age limit of input (or target) `name`, in seconds."""
        return self.max_age_s_of.get(name, self.max_age_s)
