"""An actor's stop, in the order a rollout needs: no request it took is lost or refused.

On the first SIGTERM the serving loop finishes its batch (`Actor.run`), then `drain`:

1. goes unready: `/readyz` (`Health.withdraw`), the doors' `/v2/health/ready`,
   `ServerReady` and `ModelReady`. The doors take no new connection: the HTTP door's
   listener closes (a client is refused and goes to another actor), a gRPC client gets
   GOAWAY (its next call goes to another actor);
2. unsubscribes from the requests and waits for the broker's UNSUBACK. The broker keeps a
   connection's order, so every request it gave this actor came before the UNSUBACK: from
   then on the shared subscription sends requests to the other actors alone, and every
   one this actor took is in its inbox;
3. answers what it took (`Actor.drain`): the inbox, and the doors' requests in progress
   or still to come on an HTTP connection already open, each answer closing its
   connection (`Connection: close`: the client's next request opens one to another
   actor). It ends once the UNSUBACK came, no door has a request in progress and the
   inbox stayed empty a moment, or after `actor.drain_s`.

The worker then closes the doors and the MQTT connection. A second SIGTERM ends the
process at once (`streamlearn.runtime.stop_on_signals`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import paho.mqtt.client as paho
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from streamlearn.observe.health import Health

if TYPE_CHECKING:
    from streamlearn.actor.loop import Actor

log = logging.getLogger(__name__)


class Door(Protocol):
    """What a stop asks of a door (`HttpDoor`, `GrpcDoor`)."""

    def drain(self) -> None:
        """Go unready and take no new connection or call."""

    def busy(self) -> bool:
        """Whether a request is in progress."""


def drain(
    actor: Actor, client: paho.Client, topics: list[str], health: Health, doors: Sequence[Door]
) -> int:
    """Steps 1 to 3 above; returns how many requests were answered meanwhile."""
    deadline = time.monotonic() + actor.policy.drain_s
    health.withdraw("stopping: answering the requests it took")
    for door in doors:
        door.drain()
    unsubscribed = unsubscribe(client, topics)
    answered = 0
    while True:
        settled = unsubscribed.is_set() and not any(door.busy() for door in doors)
        answered += actor.drain(limit_s=max(0.0, deadline - time.monotonic()))
        if settled and not any(door.busy() for door in doors):
            return answered  # the inbox held every request taken, and was then emptied
        if time.monotonic() >= deadline:
            log.warning(
                "stopping after drain_s=%g s: %s", actor.policy.drain_s, _unfinished(unsubscribed)
            )
            return answered


def unsubscribe(client: paho.Client, topics: list[str]) -> threading.Event:
    """Unsubscribe from `topics`; the event is set by the broker's UNSUBACK, or at once
    when the client is not connected (an actor's session, clean, ended with it). A
    reconnect meanwhile subscribes to nothing again."""
    acked = threading.Event()

    def on_unsubscribe(
        _c: paho.Client, _u: Any, _mid: int, _codes: list[ReasonCode], _p: Properties | None
    ) -> None:
        acked.set()  # the actor's only UNSUBSCRIBE

    client.on_connect = None  # `mqtt.connect`'s, which subscribes at every connect
    client.on_unsubscribe = on_unsubscribe
    if client.unsubscribe(topics)[0] != paho.MQTT_ERR_SUCCESS:
        acked.set()
    return acked


def _unfinished(unsubscribed: threading.Event) -> str:
    if not unsubscribed.is_set():
        return "no UNSUBACK from the broker"
    return "requests still in progress on a door"
