"""`[models.NAME.state]`: each device's latest prediction, retained where devices look.

With the table, the actors predict the readings of the model's `[[sources]]` topics (those
with `key = "topic:N"`, the device key) and publish each device's prediction retained on
`{prefix}/{model}/state/{key}`, at most every `every_s` per key, for at most `max_devices`
keys (`streamlearn.actor.states`); with `discovery`, Home Assistant's MQTT discovery
configs make each one a sensor entity (`streamlearn.actor.discovery`).
"""

from __future__ import annotations

from pydantic import Field

from streamlearn.config.policies import Frozen


class StateConfig(Frozen):
    """Retained per-device predictions of a model's readings (contract §2.9)."""

    every_s: float = Field(
        5.0,
        ge=0,
        le=86_400,
        description="a key's state is published at most this often: a reading within the "
        "period is kept, replacing an older one, and predicted when the period ends; 0: "
        "every reading",
    )
    max_devices: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="keys with a retained state, at most, across all of the model's actors "
        "(an index in Redis): past it the oldest state (and discovery config) is cleared; "
        "each actor also tracks at most this many keys, the least recently seen dropped; a "
        "key costs an actor about 1 KB, Redis ~100 B and the broker one retained state (and "
        "one config)",
    )
    discovery: bool = Field(
        False,
        description="also publish a retained Home Assistant MQTT discovery config per key, "
        "so that its prediction shows as a sensor entity",
    )
    discovery_prefix: str = Field(
        "homeassistant",
        min_length=1,
        max_length=128,
        pattern=r"^[^#+$\x00-\x1f\x7f][^#+\x00-\x1f\x7f]*$",
        description="Home Assistant's discovery prefix (its MQTT integration's setting)",
    )
    expire_after_s: int | None = Field(
        None,
        ge=1,
        description="with discovery: Home Assistant shows a key's entity as unavailable "
        "when no state came for this long (its expire_after); unset: never",
    )
