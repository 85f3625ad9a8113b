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
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

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

    A worker with a persistent session (`session_expiry_s`: ingest) leaves a "gone" marker
    instead, which the broker expires with the session: while it is there, the broker
    still queues that worker's share of the samples for it, and `streamlearn status` shows
    how long it has been away and how long before what was queued is dropped (the
    marker's remaining Message Expiry Interval, counted down by the broker).

    Give `mqtt.connect` `online=presence.online, gone=presence.gone`.
    """

    def __init__(
        self,
        names: Names,
        role: str,
        instance: str,
        session_expiry_s: int | None = None,
        **extra: object,
    ) -> None:
        self.topic = presence_topic(names, role, instance)
        doc = {"online": True, "role": role, "instance": instance, "pid": os.getpid()}
        self.marker = json.dumps({**doc, **extra, "started_at": time.time()}).encode()
        self.gone = b""
        if session_expiry_s:
            away = {"online": False, "role": role, "instance": instance}
            self.gone = json.dumps({**away, "session_expiry_s": session_expiry_s}).encode()
        self.session_expiry_s = session_expiry_s

    @property
    def online(self) -> tuple[str, bytes]:
        return self.topic, self.marker

    def clear(self, client: paho.Client, timeout_s: float = 5.0) -> None:
        """Replace the marker before a clean disconnect (which discards the will): clear
        it, or leave the "gone" marker when the session outlives the process."""
        props = None
        if self.gone:
            props = Properties(PacketTypes.PUBLISH)
            props.MessageExpiryInterval = self.session_expiry_s
        try:
            sent = client.publish(self.topic, self.gone, qos=1, retain=True, properties=props)
            sent.wait_for_publish(timeout_s)
        except (RuntimeError, ValueError) as exc:  # not connected: the will clears it
            log.warning("presence marker not cleared (%s); the broker's will clears it", exc)


def away(doc: dict, remaining_s: int | None, received_at: float) -> dict | None:
    """A "gone" marker's figures, from the expiry the broker had left on it when it was
    delivered: `away_s` (since the worker left) and `expires_in_s` (until the broker drops
    its session), at `received_at`; None for a marker without them.

    >>> away({"online": False, "instance": "i", "session_expiry_s": 3600}, 600, 10.0)
    {'id': 'i', 'away_s': 3000, 'expires_in_s': 600, 'at': 10.0}
    """
    expiry = doc.get("session_expiry_s")
    if not isinstance(expiry, int) or remaining_s is None:
        return None
    return {
        "id": doc.get("instance"),
        "away_s": max(0, expiry - remaining_s),
        "expires_in_s": remaining_s,
        "at": received_at,
    }
