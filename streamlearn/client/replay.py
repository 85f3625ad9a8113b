"""A stream replayed through the running service, test-then-train: per message, its
rows asked for first (the reply awaited), then published with their labels.

Each sample is so scored by a model that has not seen it, as River's
`evaluate.progressive_val_score` does in one process, but with the service's staleness
counted. `streamlearn evaluate` and the quality benchmark's service runs drive it.
Needs numpy (the service extra), unlike the rest of the client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from streamlearn.client.client import PredictionError
from streamlearn.online.evaluate import decide

if TYPE_CHECKING:
    import paho.mqtt.client as paho

    from streamlearn.client.client import Client

DEFAULT_BATCH = 40


@dataclass
class Replay:
    """What came back for each sample of a replay."""

    predicted: np.ndarray  # label or value per sample; NaN where no answer came
    versions: np.ndarray  # the model version that answered, -1 where none did
    behind: np.ndarray  # versions the answer was behind the learner's newest; -1 unknown
    seconds: float  # wall seconds of the whole replay
    messages: int  # prediction requests sent, as many as labelled messages published
    errors: dict[str, int] = field(default_factory=dict)  # error reply or timeout -> count

    @property
    def answered(self) -> int:
        return int((self.versions >= 0).sum())


def replay(
    client: Client,
    model: str,
    task: str,
    x: np.ndarray,
    y: np.ndarray,
    *,
    batch: int = DEFAULT_BATCH,
    rate: float = 0.0,
    timeout_s: float = 5.0,
    newest: Callable[[], int | None] = lambda: None,
    progress: Callable[[int], None] = lambda _done: None,
) -> Replay:
    """Per message of `batch` rows: request, await the reply, publish the labels; a
    message every `batch / rate` s (0: as soon as the previous one is done). A missing or
    error reply counts as no answer. `newest()` gives the learner's newest version."""
    n = len(y)
    predicted = np.full(n, np.nan, np.float32)
    versions = np.full(n, -1, np.int64)
    behind = np.full(n, -1, np.int64)
    errors: dict[str, int] = {}
    start = time.perf_counter()
    for lo in range(0, n, batch):
        if rate > 0:
            time.sleep(max(0.0, start + lo / rate - time.perf_counter()))
        xs, ys = x[lo : lo + batch], y[lo : lo + batch]
        part = slice(lo, lo + len(ys))
        try:
            reply = client.predict(model, xs, timeout=timeout_s)
        except (PredictionError, TimeoutError) as exc:
            key = str(exc)[:200]
            if key in errors or len(errors) < 20:  # bounded: a few kinds of failure
                errors[key] = errors.get(key, 0) + 1
        else:
            predicted[part] = decide(task, np.asarray(reply.y))
            versions[part] = reply.version
            latest = newest()
            if latest is not None:
                behind[part] = max(0, latest - reply.version)
        client.publish_many(model, xs, ys)
        progress(part.stop)
    seconds = time.perf_counter() - start
    return Replay(predicted, versions, behind, seconds, -(-n // batch), errors)


class LearnerWatch:
    """The learner's newest version, from its retained status (about once a second)."""

    def __init__(self, client: Client, status_topic: str) -> None:
        self.client, self.topic = client, status_topic
        self.latest: dict = {}
        client.mqtt.message_callback_add(status_topic, self._on_status)
        client.mqtt.subscribe(status_topic, qos=1)

    def _on_status(self, _c: object, _u: object, msg: paho.MQTTMessage) -> None:
        try:
            self.latest = json.loads(msg.payload) if msg.payload else {}
        except ValueError:
            return  # not ours to judge: `status` reports a bad status document

    def newest(self) -> int | None:
        version = self.latest.get("version")
        return int(version) if isinstance(version, int | float) else None

    def close(self) -> None:
        self.client.mqtt.message_callback_remove(self.topic)
        self.client.mqtt.unsubscribe(self.topic)
