"""How long the broker holds a reply that follows a PUBACK: Nagle's algorithm left on.

Mosquitto's default (`set_tcp_nodelay false`) holds a small packet while an earlier one on
the same socket is unacknowledged. A device that sends its request at QoS 1 is sent the
PUBACK first, and the reply waits behind it for the device's delayed ACK. The probe does
what such a device does: a second, small connection of the actor publishes QoS 1 pings on
the actor's own probe topic, the actor's connection echoes each one (QoS 0) to a topic the
probe subscribes to, and the median round trip is the broker's delay. (A connection that
publishes to itself does not show it reliably: the broker may send the PUBACK and the
delivery together.)

The probe runs at the actor's start and then every `actor.broker_probe_every_s`, in a
thread of its own; whatever fails is logged once and leaves the delay unknown (None). Over
SLOW_MS, a warning names the fix, once (and again if the delay comes back after a fix).
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
import uuid

import paho.mqtt.client as paho

from streamlearn import mqtt
from streamlearn.contract.names import Names

log = logging.getLogger(__name__)

SLOW_MS = 10.0  # well between a tuned broker's figure and Nagle's (docs/contract.md §4.5)
PINGS = 5  # one at a time; the first after an idle spell is often acknowledged at once


def advice(delay_ms: float | None) -> str | None:
    """The warning for a broker that adds `delay_ms` to a QoS 1 request's reply, if slow.

    >>> advice(0.6) is None, advice(None) is None
    (True, True)
    >>> advice(43.0).startswith("the broker delays")
    True
    """
    if delay_ms is None or delay_ms <= SLOW_MS:
        return None
    return (
        f"the broker delays a reply that follows a PUBACK by {delay_ms:.0f} ms (Nagle's "
        "algorithm): every prediction request sent at QoS 1 pays it. Set `set_tcp_nodelay "
        "true` in mosquitto.conf (or the broker's equivalent) and restart it; requests at "
        "QoS 0, as streamlearn's Client sends them, do not pay it"
    )


def probe_topics(names: Names, actor_id: str) -> tuple[str, str]:
    """(ping, echo): under the model's `probe/`, which only the actor account may use
    (deploy/mosquitto/acl), so that no device can answer or disturb a ping.

    >>> probe_topics(Names("m"), "a-1")
    ('streamlearn/m/probe/a-1', 'streamlearn/m/probe/a-1/echo')
    """
    ping = names.topic(f"probe/{actor_id}")
    return ping, f"{ping}/echo"


class BrokerProbe:
    """Measures the broker's delay now and then; `delay_ms` is the latest (None: unknown).

    `echo` is the actor connection's callback for the ping topic (paho's
    `message_callback_add`); the probe's own connection is made by its thread.
    """

    def __init__(
        self,
        url: str,
        names: Names,
        actor_id: str,
        every_s: float,
        *,
        ca_file: str | None = None,
        timeout_s: float = 1.0,
    ) -> None:
        self.url, self.ca_file = url, ca_file
        self.client_id = f"{actor_id}-probe"
        self.ping_topic, self.echo_topic = probe_topics(names, actor_id)
        self.every_s, self.timeout_s = every_s, timeout_s
        self.delay_ms: float | None = None
        self._nonce = uuid.uuid4().hex[:8].encode()  # a stray echo is not one of ours
        self._awaited, self._sent = b"", 0
        self._echoed = threading.Event()
        self._client: paho.Client | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="broker-probe", daemon=True)
        self._warned = self._failed = self._measured = False

    def echo(self, client: paho.Client, _userdata: object, msg: paho.MQTTMessage) -> None:
        """On the actor's connection (its network thread): send the ping back, QoS 0."""
        client.publish(self.echo_topic, msg.payload, qos=0)

    def latest(self) -> float | None:
        """The delay last measured, in ms; None before the first or after a failure."""
        return self.delay_ms

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timeout_s * PINGS + 1)
        if self._client is not None:
            mqtt.close(self._client)

    def measure(self) -> float | None:
        """The median of PINGS round trips, in ms (None if none came back); sets `delay_ms`."""
        if self._client is None:
            self._client = mqtt.connect(
                self.url,
                self.client_id,
                subscriptions=[(self.echo_topic, 0)],
                on_message=self._on_echo,
                ca_file=self.ca_file,
            )
        rounds = []
        for _ in range(PINGS):
            self._sent += 1  # a late echo of an earlier ping is not this one's
            self._awaited = b"%s:%d" % (self._nonce, self._sent)
            self._echoed.clear()
            sent = time.perf_counter()
            self._client.publish(self.ping_topic, self._awaited, qos=1)
            if self._echoed.wait(self.timeout_s):
                rounds.append((time.perf_counter() - sent) * 1000)
            if self._stop.is_set():
                break
        self.delay_ms = round(statistics.median(rounds), 2) if rounds else None
        return self.delay_ms

    def _on_echo(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        if msg.payload == self._awaited:
            self._echoed.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._report(self.measure())
            except Exception as exc:  # the probe must never take the actor with it
                self.delay_ms = None
                if not self._failed:
                    self._failed = True
                    log.warning("broker delay not measured: %s: %s", type(exc).__name__, exc)
            if self._stop.wait(self.every_s):
                return

    def _report(self, delay_ms: float | None) -> None:
        if delay_ms is None:
            if not self._failed:
                self._failed = True
                log.warning(
                    "broker delay not measured: no echo of a ping on %s within %.1f s "
                    "(may the actor's account read and write its model's probe/#?)",
                    self.ping_topic,
                    self.timeout_s,
                )
            return
        warning, first = advice(delay_ms), not self._measured
        if warning is not None and not self._warned:  # once, and again if it comes back
            log.warning(warning)
        elif warning is None and (first or self._warned):
            log.info("broker delay %.1f ms (a QoS 1 request's reply after its PUBACK)", delay_ms)
        self._warned, self._measured = warning is not None, True
