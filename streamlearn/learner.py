"""The learner: drains micro-batches from the sample stream into `train_on_batch`.

Each step pads the drained samples to a fixed bucket size with zero sample weights (so the
compiled step never retraces), reads the loss the step computed *before* its update
(test-then-train), acknowledges the entries it used, and publishes versioned weights every
`publish_every_steps` steps or `publish_every_ms`, whichever comes first.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from streamlearn import codec, models
from streamlearn.config import ModelConfig
from streamlearn.errors import WeightsError
from streamlearn.payloads import Rejection, Samples
from streamlearn.queue import Entry, SampleQueue
from streamlearn.weights import WeightsStore

log = logging.getLogger(__name__)

StatusSink = Callable[[dict[str, object]], None]


@dataclass
class Batch:
    """Samples for one step and the stream entries it completes."""

    x: np.ndarray
    y: np.ndarray
    done: list[bytes]

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class LearnerState:
    step: int = 0
    version: int = 0
    samples_seen: int = 0
    online_loss: float | None = None
    online_metric: float | None = None
    rollbacks: int = 0
    extra: dict[str, float] = field(default_factory=dict)


class _Carry:
    """Entries read but not yet fully trained on; an entry may span two steps."""

    def __init__(self) -> None:
        self._items: deque[list] = deque()  # [entry_id, samples, offset]
        self.available = 0

    def add(self, entries: list[Entry]) -> None:
        for e in entries:
            self._items.append([e.id, e.samples, 0])
            self.available += len(e.samples)

    def take(self, limit: int) -> Batch:
        xs, ys, done = [], [], []
        while self._items and limit > 0:
            item = self._items[0]
            eid, samples, offset = item
            end = min(len(samples), offset + limit)
            xs.append(samples.x[offset:end])
            ys.append(samples.y[offset:end])
            limit -= end - offset
            self.available -= end - offset
            if end == len(samples):
                done.append(eid)
                self._items.popleft()
            else:
                item[2] = end
        return Batch(np.concatenate(xs), np.concatenate(ys), done)


class Learner:
    """Trains one model on its sample stream and publishes its weights."""

    def __init__(
        self,
        cfg: ModelConfig,
        sample_queue: SampleQueue,
        store: WeightsStore,
        *,
        consumer: str = "learner",
        status: StatusSink | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg = cfg
        self.policy = cfg.learner
        self.queue = sample_queue
        self.store = store
        self.consumer = consumer
        self.status_sink = status
        self.clock = clock
        self.model = models.build_model(cfg)
        self.spec = models.spec(self.model)
        self.buckets = cfg.learner.bucket_sizes()
        self.state = LearnerState()
        self._variables = models.training_variables(self.model)
        self._carry = _Carry()
        self._good: list[np.ndarray] = self._snapshot()
        self._last_publish = self._last_status = clock()
        self._steps_since_publish = 0

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Join the consumer group and resume: latest weights, then entries left pending."""
        self.queue.ensure_group()
        self.state.version = self.store.latest_version()
        found = self.store.fetch(self.state.version)
        if found is not None:
            try:
                arrays, meta = codec.decode(found[1])
                codec.check_fits(arrays, self.spec)
                models.set_arrays(self.model, arrays)
                self.state.step = int(meta.get("step", 0))
                self.state.samples_seen = int(meta.get("samples_seen", 0))
                self._good = self._snapshot()
                log.info("resumed from weights version %d", self.state.version)
            except (WeightsError, ValueError) as exc:
                log.warning("latest weights v%d unusable, starting fresh: %s", found[0], exc)
        self._carry.add(self.queue.pending(self.consumer))
        self._carry.add(self.queue.claim_stale(self.consumer, min_idle_ms=30_000))

    def run(self, stop: threading.Event | None = None, max_steps: int | None = None) -> int:
        """Train until `stop` is set or `max_steps` steps ran; returns the number of steps."""
        stop = stop or threading.Event()
        steps = 0
        while not stop.is_set() and (max_steps is None or steps < max_steps):
            batch = self.drain()
            if batch is not None:
                self.train_step(batch)
                self.queue.ack(batch.done)
                steps += 1
            self._maybe_publish()
        if self._steps_since_publish:
            self.publish()
        return steps

    # -- the work ------------------------------------------------------------------------

    def drain(self, idle_block_ms: int = 100) -> Batch | None:
        """Up to `max_batch` samples: block for the first, then wait `max_wait_ms` for more."""
        limit = self.policy.max_batch
        if self._carry.available == 0:
            self._carry.add(self.queue.read(self.consumer, limit, idle_block_ms))
            if self._carry.available == 0:
                return None
        deadline = self.clock() + self.policy.max_wait_ms / 1000
        while self._carry.available < limit:
            wait_ms = int((deadline - self.clock()) * 1000)
            entries = self.queue.read(
                self.consumer, limit - self._carry.available, wait_ms if wait_ms >= 1 else None
            )
            self._carry.add(entries)
            if not entries and wait_ms < 1:
                break
        return self._carry.take(limit)

    def train_step(self, batch: Batch) -> None:
        """One padded step; a non-finite loss rolls back and dead-letters the batch."""
        n = len(batch)
        bucket = self.buckets[bisect.bisect_left(self.buckets, n)] if n <= self.buckets[-1] else n
        x = np.zeros((bucket, *batch.x.shape[1:]), np.float32)
        x[:n] = batch.x
        y = np.zeros((bucket,) if self.cfg.task == "multiclass" else (bucket, 1), np.float32)
        y[:n] = batch.y.reshape(n, *y.shape[1:])
        # Weights bucket/n make the batch mean over real samples exact and padding inert.
        w = np.zeros(bucket, np.float32)
        w[:n] = bucket / n
        logs = self.model.train_on_batch(x, y, sample_weight=w, return_dict=True)
        loss = float(logs["loss"])
        if not math.isfinite(loss):
            self._rollback(batch, f"non-finite loss {loss} at step {self.state.step + 1}")
            return
        metric = next((float(v) for k, v in logs.items() if k != "loss"), None)
        s = self.state
        s.step += 1
        s.samples_seen += n
        self._steps_since_publish += 1
        decay = 1.0 if s.online_loss is None else 1 - 0.995**n
        s.online_loss = (
            loss if s.online_loss is None else s.online_loss + decay * (loss - s.online_loss)
        )
        if metric is not None:
            prev = s.online_metric
            s.online_metric = metric if prev is None else prev + decay * (metric - prev)

    def publish(self) -> None:
        """Publish the current weights as a new version, unless any is non-finite."""
        arrays = models.get_arrays(self.model)
        try:
            codec.check_fits(arrays, self.spec)
        except WeightsError as exc:
            self._rollback(None, f"refused to publish: {exc}")
            return
        s = self.state
        s.version = max(s.version, self.store.latest_version()) + 1
        meta = {
            "model": self.cfg.name,
            "version": str(s.version),
            "step": str(s.step),
            "samples_seen": str(s.samples_seen),
        }
        self.store.publish(s.version, codec.encode(arrays, meta))
        self._good = self._snapshot()
        self._steps_since_publish = 0
        self._last_publish = self.clock()
        self.queue.trim()

    def status(self) -> dict[str, object]:
        s = self.state
        return {
            "model": self.cfg.name,
            "version": s.version,
            "step": s.step,
            "samples_seen": s.samples_seen,
            "online_loss": s.online_loss,
            "online_metric": s.online_metric,
            "metric": self._metric_name(),
            "rollbacks": s.rollbacks,
            "updated_at": time.time(),
        }

    # -- helpers -------------------------------------------------------------------------

    def _maybe_publish(self) -> None:
        now = self.clock()
        due_ms = (now - self._last_publish) * 1000 >= self.policy.publish_every_ms
        if self._steps_since_publish and (
            self._steps_since_publish >= self.policy.publish_every_steps or due_ms
        ):
            self.publish()
        if self.status_sink and (now - self._last_status) * 1000 >= self.policy.status_every_ms:
            self._last_status = now
            self.status_sink(self.status())

    def _snapshot(self) -> list[np.ndarray]:
        return models.snapshot(self._variables)

    def _rollback(self, batch: Batch | None, reason: str) -> None:
        log.warning("rolling back to the last good weights: %s", reason)
        models.restore(self._variables, self._good)
        self.state.rollbacks += 1
        if batch is not None:
            detail = {"entries": [e.decode() for e in batch.done], "samples": len(batch)}
            self.queue.write([], [("learner", Rejection(reason, json.dumps(detail).encode()))])

    def _metric_name(self) -> str | None:
        names = [m.name for m in self.model.metrics if m.name not in ("loss", "compile_metrics")]
        return names[0] if names else None


def samples_batch(samples: Samples) -> Batch:
    """A batch of in-memory samples (benchmarks and tests)."""
    return Batch(samples.x, samples.y, [])
