"""Home Assistant's ids of the device states' entities (contract §2.9), and their echo.

A key's entity has the object id `streamlearn_{model}_{key}` (the key's characters outside
`[A-Za-z0-9_-]` made `_`, and then a digest of the key added, so that two keys never share
one), so its entity id is `sensor.streamlearn_...`. Home Assistant's statestream echoes an
entity's state on `{base_topic}/sensor/{object id}/state`: `is_own_state_echo` recognises
ours, so that no role takes a prediction for a device's reading (the actors' states do not;
ingest may ask it of a source's topic). Here, below the roles, so that each may.
"""

from __future__ import annotations

import hashlib
import re

OBJECT_PREFIX = "streamlearn_"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def object_id(model: str, key: str) -> str:
    """The key's entity's object id: `[A-Za-z0-9_-]`, as a discovery topic's level must be.

    >>> object_id("room", "kitchen-1")
    'streamlearn_room_kitchen-1'
    >>> object_id("room", "café 1")
    'streamlearn_room_caf__1_f3e708ff'
    """
    safe = _UNSAFE.sub("_", key)
    if safe != key:  # two keys may become one: the digest tells them apart
        safe += "_" + hashlib.blake2b(key.encode(), digest_size=4).hexdigest()
    return f"{OBJECT_PREFIX}{model}_{safe}"


def is_own_state_echo(topic: str) -> bool:
    """Whether `topic` is Home Assistant's statestream echo of one of our entities
    (`<base>/sensor/streamlearn_.../<state or attribute>`, any case): never a reading.

    >>> is_own_state_echo("homeassistant/sensor/streamlearn_room_kitchen-1/state")
    True
    >>> is_own_state_echo("homeassistant/sensor/kitchen_temperature/state")
    False
    """
    levels = topic.split("/")
    return any(
        levels[i] == "sensor" and levels[i + 1].lower().startswith(OBJECT_PREFIX)
        for i in range(len(levels) - 2)
    )
