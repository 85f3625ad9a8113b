"""An actor's stop (`streamlearn.actor.shutdown`), in order, against stand-ins: unready
before it leaves the shared subscription, done only once the broker acknowledged that and
no door has a request in progress, never past `drain_s`. The whole stop against a real
broker and real doors: tests/integration/test_actor_rollout.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import paho.mqtt.client as paho

from streamlearn.actor import shutdown
from streamlearn.observe.health import Health


class Steps:
    """What happened, in order, across the stand-ins."""

    def __init__(self) -> None:
        self.log: list[str] = []


class Actor:
    """Answers one more request per turn of its drain; the broker's UNSUBACK comes at
    turn `acked_at` (never: None)."""

    def __init__(self, steps: Steps, client: Client, drain_s: float, acked_at: int | None):
        self.policy = SimpleNamespace(drain_s=drain_s)
        self.steps, self.client, self.acked_at, self.turns = steps, client, acked_at, 0

    def drain(self, limit_s: float) -> int:
        self.turns += 1
        if self.turns == self.acked_at:
            self.client.on_unsubscribe(self.client, None, 1, [], None)
        self.steps.log.append("drain")
        return 1


class Client:
    def __init__(self, steps: Steps, connected: bool = True) -> None:
        self.steps, self.connected = steps, connected
        self.on_connect: Any = "subscribes"
        self.on_unsubscribe: Any = None

    def unsubscribe(self, topics: list[str]) -> tuple[int, int]:
        self.steps.log.append(f"unsubscribe {topics}")
        return (paho.MQTT_ERR_SUCCESS if self.connected else paho.MQTT_ERR_NO_CONN), 1


class Door:
    def __init__(self, steps: Steps, busy_turns: int = 0) -> None:
        self.steps, self.busy_turns = steps, busy_turns

    def drain(self) -> None:
        self.steps.log.append("door unready")

    def busy(self) -> bool:
        self.busy_turns -= 1
        return self.busy_turns >= 0


def stop(acked_at: int | None, busy_turns: int = 0, connected: bool = True, drain_s=5.0):
    steps = Steps()
    client = Client(steps, connected)
    actor = Actor(steps, client, drain_s, acked_at)
    health = Health("actor")
    door = Door(steps, busy_turns)
    answered = shutdown.drain(actor, client, ["$share/g/p/m/predict"], health, [door])
    return steps.log, answered, health, client


def test_unready_before_it_unsubscribes_and_done_once_the_broker_acknowledged():
    log, answered, health, client = stop(acked_at=3)
    assert log[:2] == ["door unready", "unsubscribe ['$share/g/p/m/predict']"]
    assert not health.ready().ok and "stopping" in health.ready().detail
    assert client.on_connect is None, "a reconnect while draining subscribes to nothing"
    # turns 1 and 2 before the UNSUBACK; 3 brings it; 4 answers what came before it
    assert answered == 4


def test_a_request_in_progress_on_a_door_keeps_it_draining():
    _, answered, _, _ = stop(acked_at=1, busy_turns=3)
    assert answered > 2


def test_no_unsubscribe_to_wait_for_without_a_connection():
    _, answered, _, _ = stop(acked_at=None, connected=False)
    assert answered == 1


def test_no_unsuback_ends_the_drain_at_drain_s(caplog):
    _, answered, _, _ = stop(acked_at=None, drain_s=0.05)
    assert answered >= 1
    assert "no UNSUBACK from the broker" in caplog.text
