"""The learner: drains micro-batches from the sample stream into `train_on_batch`.

- Shapes: batches are padded to a few bucket sizes (`batching`), each traced once at start,
  so no step retraces afterwards; `models.TrainProbe` counts traces to show it.
- Test-then-train: the loss and metric `train_on_batch` returns are computed on the batch
  with the weights from before its update; their running means go into the status.
- Guards: a step whose loss, weights or optimizer state is non-finite is undone (restore
  the last good snapshot, replay the good batches since: `guard`) and its batch
  dead-lettered.
- Durability: entries are acknowledged once the state that learned them is durable (a
  checkpoint when `checkpoint_dir` is set, else a published version). A restart resumes
  from that state (`resume`) and trains again on what is still pending, so no sample is
  lost.
- Variants: a learner may be one of several variants of its model (`streamlearn.champion`);
  its `Contest` reports its figures at each status tick and may promote it, and only the
  champion's learner publishes the model's status.
- Redis refusing writes (full, down) is never fatal: training goes on, and each refused
  write and read is tried again after a backoff (`streamlearn.writes`).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import keras
import numpy as np

from streamlearn import codec, models
from streamlearn.batching import Batch, Drainer, Prefetcher, bucket_sizes
from streamlearn.champion import Contest, Window
from streamlearn.checkpoint import CheckpointDir
from streamlearn.config import BASE_VARIANT, ModelConfig
from streamlearn.errors import ConfigError, WeightsError
from streamlearn.guard import StepGuard
from streamlearn.queue import SampleQueue
from streamlearn.resume import LearnerState, from_checkpoint, from_published
from streamlearn.weights import VariantWeights, WeightsStore
from streamlearn.writes import LearnerWrites

log = logging.getLogger(__name__)

StatusSink = Callable[[dict[str, object]], None]


class Learner:
    """Trains one model on its sample stream and publishes its weights."""

    def __init__(
        self,
        cfg: ModelConfig,
        sample_queue: SampleQueue,
        store: WeightsStore | VariantWeights,
        *,
        consumer: str = "learner",
        status: StatusSink | None = None,
        clock: Callable[[], float] = time.monotonic,
        variant: str = BASE_VARIANT,
        contest: Contest | None = None,
    ) -> None:
        """`cfg` is the variant's (`ModelConfig.variant`); `contest` its place among the
        model's variants, None for a model without any."""
        self.cfg = cfg
        self.variant = variant
        self.contest = contest
        self.window = Window(cfg.promotion.window_samples)
        self.policy = policy = cfg.learner
        self.queue = sample_queue
        self.store = store
        self.consumer = consumer
        self.status_sink = status
        self.clock = clock
        self.strategy = models.distribution(policy)
        self.replicas = self.strategy.num_replicas_in_sync if self.strategy else 1
        self.model = models.build_model(cfg, self.strategy)
        self.probe = models.TrainProbe(self.model, self.replicas)
        self.spec = models.spec(self.model)
        self._variables = models.training_variables(self.model)
        self.buckets = bucket_sizes(policy.bucket_sizes(), policy.max_batch, self.replicas)
        self.state = LearnerState()
        self.writes = LearnerWrites(sample_queue, store, policy, cfg.ingest)
        durable_s = (
            policy.checkpoint_every_s if policy.checkpoint_dir else policy.publish_every_ms / 1000
        )
        self.drainer = Drainer(
            sample_queue,
            consumer,
            policy,
            self.buckets,
            () if cfg.task == "multiclass" else (1,),
            stale_after_ms=int(max(30.0, 3 * durable_s) * 1000),
            deadletter=self.writes.deadletter,
        )
        depth = policy.prefetch_batches
        reading = self.writes.reading
        self.prefetcher = Prefetcher(self.drainer.drain, depth, reading) if depth else None
        where = [cfg.name] if variant == BASE_VARIANT else [cfg.name, "variants", variant]
        self.checkpoints = (
            CheckpointDir(Path(policy.checkpoint_dir, *where)) if policy.checkpoint_dir else None
        )
        self.metric_name: str | None = None
        self.guard = StepGuard(self._variables, self._fit, self._rolled_back)
        self._warm_traces = 0
        self._steps_since_publish = self._samples_since_checkpoint = 0
        self._last_publish = self._last_status = self._last_checkpoint = clock()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Resume (checkpoint, else latest weights), take pending entries, trace every bucket."""
        self.queue.ensure_group()
        source = self._resume()
        self.state.version = max(self.state.version, self.store.latest_version())
        self.guard.reset()
        pending = self.drainer.resume()
        self.warm_up()
        log.info(
            "learner %s: %s, step %d, %d entries pending, devices %s, %d traces for buckets %s",
            self.cfg.name,
            source,
            self.state.step,
            pending,
            keras.distribution.list_devices(),
            self._warm_traces,
            list(self.buckets),
        )

    def warm_up(self) -> None:
        """Trace the step once per bucket with zero sample weights, then undo its effects."""
        before = models.snapshot(self._variables)
        for size in self.buckets:
            x = np.zeros((size, *self.cfg.sample_shape), np.float32)
            y = np.zeros((size,) if self.cfg.task == "multiclass" else (size, 1), np.float32)
            if self.replicas > 1 and size == self.buckets[0]:
                # Keras builds the compiled loss and metrics from a plain (undivided) batch.
                self.model.train_on_batch(x, y, sample_weight=np.zeros(size, np.float32))
            logs = self._fit(x, y, np.zeros(size, np.float32))
        models.restore(self._variables, before)
        self.metric_name = next((k for k in logs if k not in ("loss", models.FINITE)), None)
        self._warm_traces = self.probe.traces
        if self.contest and self.contest.rule.on == "metric" and self.metric_name is None:
            raise ConfigError(
                f"models.{self.cfg.name}.promotion.on: 'metric', but variant {self.variant!r} "
                "compiles no metric; compare on 'loss' or give the model a metric"
            )

    def run(
        self, stop: threading.Event | None = None, max_steps: int | None = None, *, burst=False
    ) -> int:
        """Train until `stop` is set, `max_steps` batches ran or, with `burst`, the stream
        has nothing more; returns the number of batches.

        On the way out it publishes and checkpoints what it learned; batches read ahead but
        not trained stay pending (and are trained by the next `run` or the next process).
        """
        stop = stop or threading.Event()
        steps = 0
        if self.prefetcher:
            self.prefetcher.start()
        try:
            while not stop.is_set() and (max_steps is None or steps < max_steps):
                batch = self.prefetcher.get(0.1) if self.prefetcher else self._drain()
                if batch is not None:
                    self.train_step(batch)
                    steps += 1
                elif burst and (self.prefetcher is None or self.prefetcher.idle.is_set()):
                    break
                self._tick()
        finally:
            if self.prefetcher:
                self.prefetcher.stop()
        if self._steps_since_publish:
            self.publish()
        if self.checkpoints and (self._samples_since_checkpoint or self.writes.unacked):
            self.checkpoint()
        elif self.checkpoints is None and self.writes.unacked and not self._steps_since_publish:
            self.writes.made_durable()  # dead letters only
        return steps

    def _drain(self) -> Batch | None:
        """Without read-ahead: a drain in this thread, after the backoff when Redis failed."""
        reading = self.writes.reading
        if not reading.due():
            time.sleep(min(0.1, reading.delay()))
            return None
        return reading.result(lambda: self.drainer.drain(idle_block_ms=100))

    # -- the work ------------------------------------------------------------------------

    def train_step(self, batch: Batch) -> None:
        """One step, scored before it learns; a non-finite outcome undoes it."""
        self.writes.unacked += batch.done  # acknowledged at the next durable point, either way
        if not batch.n:  # only unusable entries, dead-lettered when read
            return
        logs = self._fit(batch.x, batch.y, batch.w)
        loss = float(logs["loss"])
        if not self.guard.finite(logs):
            what = "loss" if not math.isfinite(loss) else "weights or optimizer state"
            self._undo(batch, f"non-finite {what} at step {self.state.step + 1} (loss {loss})")
            return
        s = self.state
        s.step += 1
        s.samples_seen += batch.n
        self._steps_since_publish += 1
        self._samples_since_checkpoint += batch.n
        rate = 1.0 if s.online_loss is None else 1 - 0.995**batch.n
        s.online_loss = _ema(s.online_loss, loss, rate)
        metric = None if self.metric_name is None else float(logs[self.metric_name])
        if metric is not None:
            s.online_metric = _ema(s.online_metric, metric, rate)
        self.window.add(batch.n, loss, metric)
        self.guard.kept(batch)

    def publish(self) -> None:
        """Publish the current weights as a new version; non-finite weights never leave.
        When Redis refuses, training goes on and `_tick` tries again after the backoff."""
        arrays = models.get_arrays(self.model)
        try:
            codec.check_fits(arrays, self.spec)
        except WeightsError as exc:
            self.guard.back(f"refused to publish: {exc}")
            return
        s = self.state

        def blob(version: int) -> bytes:
            meta = {"model": self.cfg.name, "version": str(version), "step": str(s.step)}
            meta.update(samples_seen=str(s.samples_seen), variant=self.variant)
            return codec.encode(arrays, meta)

        self._last_publish = self.clock()
        version = self.writes.publish(s.version, blob)
        if version is None:
            return
        s.version = version
        self._steps_since_publish = 0
        if self.checkpoints is None:
            self.writes.made_durable()

    def checkpoint(self) -> None:
        """Save every training variable and the counters, then acknowledge what they cover."""
        if self.checkpoints is None or not self.guard.mark():
            return
        arrays = dict(zip(models.training_names(self.model), self.guard.good, strict=True))
        try:
            self.checkpoints.save(arrays, {**asdict(self.state), "model": self.cfg.name})
        except OSError as exc:  # entries stay pending; the next interval tries again
            log.error("checkpoint to %s failed: %s", self.checkpoints.path, exc)
        else:
            self._samples_since_checkpoint = 0
            self.writes.made_durable()
        self._last_checkpoint = self.clock()

    def status(self) -> dict[str, object]:
        s = self.state
        return {
            "model": self.cfg.name,
            "version": s.version,
            "step": s.step,
            "samples_seen": s.samples_seen,
            "online_loss": s.online_loss,
            "online_metric": s.online_metric,
            "metric": self.metric_name,
            "rollbacks": s.rollbacks,
            "dead_lettered": s.dead_lettered,
            "traces": self.probe.traces,
            "retraces": self.probe.traces - self._warm_traces,
            "variant": self.variant,
            **self.window.figures(),
            **self.writes.status(),
            "updated_at": time.time(),
        }

    def metrics(self) -> dict[str, float | int | None]:
        """For `streamlearn.metrics` (Prometheus): names ending in `_total` are counters."""
        s = self.state
        return {
            "steps_total": s.step,
            "samples_total": s.samples_seen,
            "rollbacks_total": s.rollbacks,
            "dead_lettered_samples_total": s.dead_lettered,
            "traces_total": self.probe.traces,
            "retraces_total": self.probe.traces - self._warm_traces,  # after warm-up: 0
            "version": s.version,
            "online_loss": s.online_loss,
            "online_metric": s.online_metric,
            **self.writes.metrics(),
        }

    # -- helpers -------------------------------------------------------------------------

    def _fit(self, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, float]:
        if self.replicas > 1:
            x, y, w = (models.split_per_replica(self.strategy, a) for a in (x, y, w))
        return self.model.train_on_batch(x, y, sample_weight=w, return_dict=True)

    def _tick(self) -> None:
        now = self.clock()
        if (
            self._steps_since_publish
            and (
                self._steps_since_publish >= self.policy.publish_every_steps
                or (now - self._last_publish) * 1000 >= self.policy.publish_every_ms
            )
            and self.writes.publishing.due()
        ):
            self.publish()
        if self.checkpoints is None:
            if self.writes.unacked and not self._steps_since_publish:
                self.writes.made_durable()  # dead letters only, or acks Redis refused
        elif (self._samples_since_checkpoint or self.writes.unacked) and (
            now - self._last_checkpoint >= self.policy.checkpoint_every_s
            or self._samples_since_checkpoint >= self.policy.checkpoint_every_samples
        ):
            self.checkpoint()
        self.writes.maybe_trim()
        if (self.status_sink or self.contest) and (
            now - self._last_status
        ) * 1000 >= self.policy.status_every_ms:
            self._last_status = now
            self.report()

    def report(self, compete: bool = True) -> None:
        """Status to the sink; with variants, figures to the contest first (unless not
        `compete`), and the status only from the champion, which speaks for the model with
        every variant's figures side by side."""
        status = self.status()
        if self.contest is not None:
            if compete and self.writes.compete(self.contest, status) is not None:
                self.publish()  # the actors get the new champion's weights now
                status = self.status()
            status.update(self.contest.view())
            if not self.contest.is_champion:
                return
        if self.status_sink:
            self.status_sink(status)

    def _rolled_back(self, reason: str) -> None:
        log.error("%s at step %d; back to the last good snapshot", reason, self.state.step)
        self.state.rollbacks += 1

    def _undo(self, batch: Batch, reason: str) -> None:
        """Back to the variables before `batch`, which is dead-lettered."""
        log.warning("undoing a step and dead-lettering its %d samples: %s", batch.n, reason)
        self.guard.undo()
        self.state.rollbacks += 1
        self.state.dead_lettered += batch.n
        detail = {
            "entries": [e.decode() for e in batch.entries],
            "x": batch.x[: min(batch.n, 8)].tolist(),  # the dead letter keeps ~1 KiB anyway
            "y": batch.y[: min(batch.n, 8)].reshape(-1).tolist(),
        }
        self.writes.deadletter(reason, json.dumps(detail).encode())

    def _resume(self) -> str:
        """Counters and variables from the checkpoint, else the latest published weights."""
        if self.checkpoints and (
            state := from_checkpoint(self.checkpoints, self.model, self._variables)
        ):
            self.state = state
            return f"resumed from checkpoint {self.checkpoints.path}"
        if found := from_published(self.store, self.model, self.variant):
            version, self.state.step, self.state.samples_seen = found
            return f"resumed from published weights v{version}"
        return "fresh weights"


def _ema(prev: float | None, value: float, rate: float) -> float:
    return value if prev is None else prev + rate * (value - prev)
