"""Home Assistant MQTT discovery for the per-device states (`streamlearn.actor.states`).

A key's retained config on `{discovery_prefix}/sensor/{object id}/config` makes its state a
sensor entity (Home Assistant's MQTT sensor: `state_topic`, `value_template`, `unique_id`,
`device`, ...); its object id, and how its statestream echo is told from a reading, are
`streamlearn.contract.entities`'.
"""

from __future__ import annotations

from typing import Any

from streamlearn.config.app import ModelConfig
from streamlearn.contract.entities import is_own_state_echo, object_id

__all__ = ["config_topic", "is_own_state_echo", "object_id", "sensor_config"]


def config_topic(prefix: str, oid: str) -> str:
    return f"{prefix}/sensor/{oid}/config"


def sensor_config(
    cfg: ModelConfig, key: str, state_topic: str, expire_after_s: int | None = None
) -> dict[str, Any]:
    """The discovery payload of `key`'s entity: its state is the prediction (a
    multiclass model's: the most probable class); the version serving it an attribute."""
    oid = object_id(cfg.name, key)
    doc: dict[str, Any] = {
        "name": "prediction",
        "object_id": oid,
        "unique_id": oid,
        "state_topic": state_topic,
        "qos": 1,
        "json_attributes_topic": state_topic,
        # not `at` nor the probabilities: attributes that change at every update cost Home
        # Assistant a state write each (its MQTT sensor docs)
        "json_attributes_template": "{{ {'version': value_json.version, "
        "'variant': value_json.variant, 'model': value_json.model} | tojson }}",
        "device": {
            "identifiers": [oid],
            "name": f"streamlearn {cfg.name} {key}",
            "manufacturer": "streamlearn",
            "model": cfg.name,
        },
    }
    if cfg.task == "multiclass":
        doc["value_template"] = "{{ value_json['class'] }}"
    else:
        doc["value_template"] = "{{ value_json.y }}"
        doc["state_class"] = "measurement"
    if expire_after_s is not None:
        doc["expire_after"] = expire_after_s
    return doc
