"""What a `streamlearn.client.client.Client` waits for: replies to its requests (a `Prediction`,
or a `PredictionError`), and the broker's acknowledgements of its publishes. Each is
bounded; see the classes."""

from __future__ import annotations

import heapq
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho

from streamlearn.errors import StreamlearnError


class ConnectionClosedError(StreamlearnError, ConnectionError):
    """The connection closed, or was lost, before the reply came."""


class PredictionError(StreamlearnError):
    """The service answered a request with an error; the message is the service's."""

    def __init__(self, message: str, model: str | None = None) -> None:
        super().__init__(message)
        self.model = model


@dataclass(frozen=True, slots=True)
class Prediction:
    """A reply: `y` is a number, class probabilities, or a list of those for several rows."""

    y: Any
    version: int
    model: str
    variant: str | None = None


def prediction(doc: dict[str, Any]) -> Prediction:
    """A reply document as a Prediction; an error reply raises PredictionError."""
    if "error" in doc:
        raise PredictionError(str(doc["error"]), doc.get("model"))
    try:
        return Prediction(doc["y"], doc["version"], doc["model"], doc.get("variant"))
    except KeyError as exc:
        raise StreamlearnError(f"reply without {exc.args[0]!r}: {doc!r}") from None


class Pending:
    """Requests awaiting replies, by correlation data: at most `limit`, each failed with
    TimeoutError at its deadline by one thread.

    Deadlines of answered requests stay in the heap until they pass, or until it holds
    twice `limit` entries and is rebuilt from the waiting ones.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._waiting: dict[bytes, tuple[Future, Callable[[dict], Any], str]] = {}
        self._deadlines: list[tuple[float, bytes]] = []
        self._cond = threading.Condition()
        self._refusal: str | None = "not connected yet"  # None: requests are taken
        self._closed = False
        self._timer = threading.Thread(target=self._expire, name="sl-client-timeouts", daemon=True)
        self._timer.start()

    def add(
        self, correlation: bytes, timeout: float, outcome: Callable[[dict], Any], why: str
    ) -> Future:
        future: Future = Future()
        with self._cond:
            if self._refusal is not None:
                raise ConnectionClosedError(self._refusal)
            if len(self._waiting) >= self.limit:
                raise StreamlearnError(
                    f"{len(self._waiting)} requests already await replies (max_pending="
                    f"{self.limit}): wait for some first"
                )
            self._waiting[correlation] = (future, outcome, why)
            heapq.heappush(self._deadlines, (time.monotonic() + timeout, correlation))
            if len(self._deadlines) > 2 * self.limit:
                self._deadlines = [d for d in self._deadlines if d[1] in self._waiting]
                heapq.heapify(self._deadlines)
            if self._deadlines[0][1] == correlation:
                self._cond.notify()
        future.add_done_callback(lambda _f: self._forget(correlation))  # cancelled: forgotten
        return future

    def resolve(self, correlation: bytes, payload: bytes) -> None:
        """Complete the request `payload` answers; a late or repeated reply is dropped."""
        with self._cond:
            entry = self._waiting.pop(correlation, None)
        if entry is None or not entry[0].set_running_or_notify_cancel():
            return
        future, outcome, _ = entry
        try:
            doc = json.loads(payload)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            future.set_result(outcome(doc))
        except StreamlearnError as exc:
            future.set_exception(exc)
        except ValueError as exc:
            future.set_exception(StreamlearnError(f"unreadable reply ({exc}): {payload[:200]!r}"))

    def open(self) -> None:
        with self._cond:
            if not self._closed:
                self._refusal = None

    def suspend(self, reason: str) -> None:
        """Fail every waiting request, and refuse new ones until `open`."""
        with self._cond:
            if not self._closed:
                self._refusal = f"not connected: {reason}"
        self._fail_all(ConnectionClosedError(reason))

    def close(self) -> bool:
        """Fail every waiting request and stop; False when already closed."""
        with self._cond:
            if self._closed:
                return False
            self._closed, self._refusal = True, "client is closed"
            waiting = len(self._waiting)
            self._cond.notify()
        self._fail_all(ConnectionClosedError(f"client closed with {waiting} requests unanswered"))
        self._timer.join()
        return True

    def _forget(self, correlation: bytes) -> None:
        with self._cond:
            self._waiting.pop(correlation, None)

    def _fail_all(self, exc: Exception) -> None:
        with self._cond:
            waiting, self._waiting, self._deadlines = list(self._waiting.values()), {}, []
        for future, _, _ in waiting:
            if future.set_running_or_notify_cancel():
                future.set_exception(exc)

    def _expire(self) -> None:
        while True:
            expired = []
            with self._cond:
                if self._closed:
                    return
                now = time.monotonic()
                while self._deadlines and self._deadlines[0][0] <= now:
                    entry = self._waiting.pop(heapq.heappop(self._deadlines)[1], None)
                    if entry is not None:
                        expired.append(entry)
                if not expired:
                    self._cond.wait(self._deadlines[0][0] - now if self._deadlines else None)
            for future, _, why in expired:
                if future.set_running_or_notify_cancel():
                    future.set_exception(TimeoutError(why))


@dataclass(frozen=True, slots=True)
class Sent:
    topic: str
    info: paho.MQTTMessageInfo
    refusals_before: int  # the broker's refusals counted before this was published


class Acks:
    """The broker's refusals of QoS 1 publishes (an MQTT v5 PUBACK reason such as "Not
    authorized"), by message id: at most 65,535 entries, one per id.

    A refusal numbered below a publish's `refusals_before` is an earlier message's that
    reused the id (one given up on after its timeout), not this one's.
    """

    def __init__(self) -> None:
        self.refusals = 0
        self._refused: dict[int, tuple[int, str]] = {}
        self._lock = threading.Lock()

    def on_publish(self, _c: object, _u: object, mid: int, reason: Any, _p: object) -> None:
        if getattr(reason, "is_failure", False):
            with self._lock:
                self._refused[mid] = (self.refusals, str(reason))
                self.refusals += 1

    def confirm(self, sent: Sent, timeout: float) -> None:
        """Wait for the broker's PUBACK; raise if it refused the message or never answered."""
        try:
            sent.info.wait_for_publish(timeout)
        except (RuntimeError, ValueError) as exc:
            raise ConnectionClosedError(f"publish to {sent.topic} failed: {exc}") from None
        if not sent.info.is_published():
            raise TimeoutError(f"no PUBACK for {sent.topic} within {timeout} s")
        with self._lock:
            number, reason = self._refused.pop(sent.info.mid, (-1, ""))
        if number >= sent.refusals_before:
            raise StreamlearnError(f"the broker refused a publish to {sent.topic}: {reason}")
