"""Ingest's inbox holds no more QoS 1 payload bytes than `max_inbox_bytes`: a message that
would take it past the bound waits (the client reads no further, the broker keeps the
rest) until the loop has taken enough; nothing is lost, the order is kept."""

from __future__ import annotations

import threading
import time

import paho.mqtt.client as paho

from streamlearn.config import IngestConfig
from streamlearn.ingest.inbox import IngestInbox


class Connection:
    """What the inbox reads of the client that delivered a message."""

    generation = 0

    def __init__(self) -> None:
        self.connected = True

    def is_connected(self) -> bool:
        return self.connected


def message(mid: int, size: int, qos: int = 1) -> paho.MQTTMessage:
    msg = paho.MQTTMessage(mid, b"sl/m/samples")
    msg.payload, msg.qos = bytes([mid % 256]) * size, qos
    return msg


def until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.01)


def test_qos1_messages_wait_at_the_byte_bound_and_all_arrive_in_order():
    inbox = IngestInbox(IngestConfig(max_inbox_bytes=1000))
    client = Connection()
    seen: list[int] = []

    def deliver() -> None:  # paho's network thread
        for mid in range(1, 9):
            inbox.on_message(client, None, message(mid, 400))  # type: ignore[arg-type]
            seen.append(inbox.bytes)

    paho_thread = threading.Thread(target=deliver)
    paho_thread.start()
    until(lambda: inbox.held > 0)
    assert len(inbox) == 2 and inbox.bytes == 800, "the third would pass 1000 bytes"
    taken = []
    while len(taken) < 8:
        taken += [d.mid for d in inbox.take(1, 0.05)]
        assert inbox.bytes <= 1000
    paho_thread.join()
    assert taken == list(range(1, 9)), "none lost, none reordered"
    assert max(seen) <= 1000


def test_a_message_larger_than_the_bound_is_taken_alone_and_qos0_is_dropped_over_it():
    inbox = IngestInbox(IngestConfig(max_inbox_bytes=1000))
    client = Connection()
    inbox.on_message(client, None, message(1, 5000))  # type: ignore[arg-type]
    assert len(inbox) == 1, "an empty inbox takes any message"
    inbox.on_message(client, None, message(2, 10, qos=0))  # type: ignore[arg-type]
    assert (len(inbox), inbox.dropped) == (1, 1)


def test_a_held_message_is_let_go_unkept_when_its_client_closes():
    """Never acknowledged: the broker delivers it again to the next connection."""
    inbox = IngestInbox(IngestConfig(max_inbox_bytes=1000))
    client = Connection()
    inbox.on_message(client, None, message(1, 900))  # type: ignore[arg-type]
    paho_thread = threading.Thread(
        target=inbox.on_message,
        args=(client, None, message(2, 900)),  # type: ignore[arg-type]
    )
    paho_thread.start()
    until(lambda: inbox.held > 0)
    client.connected = False
    paho_thread.join()
    assert [d.mid for d in inbox.take(10, 0)] == [1]


class Waits(threading.Event):
    """The inbox's arrival event, its waits recorded (timeouts in seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return super().wait(0)  # nothing more comes here: no need to wait it out


def test_a_lone_message_is_taken_at_once_and_a_run_waits_for_company():
    """A trickle's message is written without the linger (5 ms each, for a sample that no
    other comes with: its freshness); messages that come faster than one a run (two
    waiting, or the last run more than one) wait up to the linger for more."""
    inbox = IngestInbox(IngestConfig())
    client = Connection()
    inbox._arrived = waits = Waits()
    inbox.on_message(client, None, message(1, 10))  # type: ignore[arg-type]
    assert [d.mid for d in inbox.take(500, 0.005)] == [1]
    assert 0.005 not in waits.timeouts, "a lone message waited for company"
    for mid in (2, 3):
        inbox.on_message(client, None, message(mid, 10))  # type: ignore[arg-type]
    assert [d.mid for d in inbox.take(500, 0.005)] == [2, 3]
    assert waits.timeouts.count(0.005) == 1, "a run of two did not wait for more"
    inbox.on_message(client, None, message(4, 10))  # type: ignore[arg-type]
    assert [d.mid for d in inbox.take(500, 0.005)] == [4]
    assert waits.timeouts.count(0.005) == 2, "after a run of two, one alone waits too"
