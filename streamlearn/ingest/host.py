"""Ingest as a Sparkplug 3.0 primary host (`[models.NAME.sparkplug] primary_host`).

Edge nodes configured to wait for their primary host publish only while its retained
STATE, `spBv1.0/STATE/{host}`, says `{"online": true, "timestamp": ms}`. Ingest's own
connection already has a will (its presence marker, contract §2.5), so STATE takes a
connection of its own: its will says `online: false` with the timestamp of its online
message, both set before it connects (an edge node ignores a STATE older than the last
it took).

Several ingest processes are one host. Each publishes its own online message; when one
dies, its will says offline, and (as the spec asks of a host that sees its own STATE go
offline while alive) every live one starts a new session: a clean disconnect (no will),
then a connection whose will and online message carry a fresh timestamp. A fresh one is
needed: an online message newer than its connection's will would make that will, once
sent, older than what edge nodes took, and ignored. So the host is offline only while no
ingest process lives (and for the moments of a new session after the newest one died).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from streamlearn import mqtt
from streamlearn.contract.sparkplug.payloads import state_payload
from streamlearn.contract.sparkplug.topics import state_topic
from streamlearn.errors import StreamlearnError

log = logging.getLogger(__name__)

RETRY_S = 5.0  # a session that could not connect is tried again after this


class HostState:
    """The STATE of host `host_id`, kept online by this process while it runs."""

    def __init__(
        self,
        url: str,
        host_id: str,
        client_id: str,
        ca_file: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.topic = state_topic(host_id)
        self.client_id = client_id
        self.ca_file = ca_file
        self.clock = clock
        self.sessions = 0  # sessions started (each a fresh online message)
        self._client: mqtt.BufferedClient | None = None
        self._timestamp = 0
        self._renew = threading.Event()  # a new session is due
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkplug-state", daemon=True)

    def start(self) -> None:
        """Go online, in a thread of its own that keeps it so."""
        self._thread.start()

    def close(self) -> None:
        """Say offline (the session's death certificate), then disconnect."""
        self._stop.set()
        self._renew.set()
        self._thread.join()
        self._end(online=False)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._renew.clear()
            try:
                self._session()
            except StreamlearnError as exc:
                log.warning("sparkplug STATE: %s; trying again in %.0f s", exc, RETRY_S)
                self._stop.wait(RETRY_S)
                continue
            self._renew.wait()
            if not self._stop.is_set():
                self._end(online=True)

    def _session(self) -> None:
        """Connect with a will of a fresh timestamp, subscribe to the host's own STATE,
        then say online (the spec's order)."""
        self._timestamp = stamp = int(self.clock() * 1000)
        connacks = []

        def reconnected(_props: object) -> None:  # paho reconnected: the will may be out
            connacks.append(1)
            if len(connacks) > 1:
                self._renew.set()

        self._client = client = mqtt.connect(
            self.url,
            self.client_id,
            ca_file=self.ca_file,
            subscriptions=[(self.topic, 1)],
            on_message=self._on_message,
            will=(self.topic, state_payload(False, stamp)),
            on_connack=reconnected,
        )
        client.publish(self.topic, state_payload(True, stamp), qos=1, retain=True)
        self.sessions += 1
        log.info("sparkplug STATE online on %s (timestamp %d)", self.topic, stamp)

    def _on_message(self, _c: Any, _u: object, msg: Any) -> None:
        """Another process's will (or a stale one) says offline: a new session is due. A
        retained message is what held before this session's online message: not news."""
        if msg.retain:
            return
        try:
            online = json.loads(msg.payload).get("online")
        except (ValueError, AttributeError):
            return
        if online is False:
            self._renew.set()

    def _end(self, online: bool) -> None:
        """End the session: still online (a clean disconnect, no will) or not (the death
        certificate first, retained, of the session's timestamp)."""
        client, self._client = self._client, None
        if client is None:
            return
        if not online:
            info = client.publish(
                self.topic, state_payload(False, self._timestamp), qos=1, retain=True
            )
            with contextlib.suppress(RuntimeError, ValueError):  # not connected: the will says it
                info.wait_for_publish(5)
        mqtt.close(client)
