"""A worker's presence: a retained marker under the model's status topic while it runs.

Light on purpose (paho only): every worker imports it, and ingest loads no TensorFlow.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time

import paho.mqtt.client as paho

from streamlearn.contract.names import Names

log = logging.getLogger(__name__)


def presence_topic(names: Names, role: str, instance: str) -> str:
    """`{prefix}/{model}/status/{role}/{instance}`, beside the model's status.

    >>> presence_topic(Names("m"), "ingest", "host/1")
    'streamlearn/m/status/ingest/host_1'
    """
    return names.topic(f"status/{role}/{re.sub(r'[/+#]', '_', instance)}")


class Presence:
    """A worker's retained "online" marker: published at each connect, cleared by the
    broker (the will) when the process dies and by `clear` when it stops.

    Give `mqtt.connect` `online=presence.online`.
    """

    def __init__(self, names: Names, role: str, instance: str, **extra: object) -> None:
        self.topic = presence_topic(names, role, instance)
        doc = {"online": True, "role": role, "instance": instance, "pid": os.getpid()}
        self.marker = json.dumps({**doc, **extra, "started_at": time.time()}).encode()

    @property
    def online(self) -> tuple[str, bytes]:
        return self.topic, self.marker

    def clear(self, client: paho.Client, timeout_s: float = 5.0) -> None:
        """Remove the marker before a clean disconnect (which discards the will)."""
        try:
            client.publish(self.topic, b"", qos=1, retain=True).wait_for_publish(timeout_s)
        except (RuntimeError, ValueError) as exc:  # not connected: the will clears it
            log.warning("presence marker not cleared (%s); the broker's will clears it", exc)
