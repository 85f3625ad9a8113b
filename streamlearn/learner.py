"""The learner: drains micro-batches from the sample stream into `train_on_batch`.

- Shapes: batches are padded to a few bucket sizes (`batching`), each traced once at start,
  so no step retraces afterwards; `models.TrainProbe` counts traces to show it.
- Test-then-train: the loss and metric `train_on_batch` returns are computed on the batch
  with the weights from before its update; their running means go into the status.
- Guards: a step whose loss, weights or optimizer state is non-finite is undone (restore
  the last good snapshot, replay the good batches since) and its batch dead-lettered.
- Durability: entries are acknowledged once the state that learned them is durable (a
  checkpoint when `checkpoint_dir` is set, else a published version). A restart resumes
  from that state and trains again on what is still pending, so no sample is lost.
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
from dataclasses import asdict, dataclass
from pathlib import Path

import keras
import numpy as np
import redis

from streamlearn import codec, models
from streamlearn.batching import Batch, Drainer, Prefetcher, bucket_sizes
from streamlearn.champion import Contest, Window
from streamlearn.checkpoint import CheckpointDir
from streamlearn.config import BASE_VARIANT, ModelConfig
from streamlearn.errors import ConfigError, WeightsError
from streamlearn.queue import SampleQueue
from streamlearn.weights import VariantWeights, WeightsStore
from streamlearn.writes import LearnerWrites

log = logging.getLogger(__name__)

StatusSink = Callable[[dict[str, object]], None]
_REPLAY_MAX = 200  # steps between rollback snapshots: bounds the batches kept and replayed


@dataclass
class LearnerState:
    """Counters that a checkpoint saves and the status reports."""

    step: int = 0
    version: int = 0
    samples_seen: int = 0
    online_loss: float | None = None
    online_metric: float | None = None
    rollbacks: int = 0
    dead_lettered: int = 0  # samples of undone steps

    @classmethod
    def from_json(cls, doc: dict) -> LearnerState:
        """Counters saved in a checkpoint; ValueError or TypeError when one is not a number."""
        counts = ("step", "version", "samples_seen", "rollbacks", "dead_lettered")
        means = ("online_loss", "online_metric")
        return cls(
            **{k: int(doc.get(k, 0)) for k in counts},
            **{k: None if doc.get(k) is None else float(doc[k]) for k in means},
        )


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
        self._names = models.training_names(self.model)
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
        self._good = self._snapshot()  # last known-good variables, the rollback point
        self._since_good: list[Batch] = []  # good steps since, replayed after a rollback
        self._warm_traces = 0
        self._steps_since_publish = self._samples_since_checkpoint = 0
        self._last_publish = self._last_status = self._last_checkpoint = clock()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Resume (checkpoint, else latest weights), take pending entries, trace every bucket."""
        self.queue.ensure_group()
        source = self._resume_checkpoint() or self._resume_published() or "fresh weights"
        self.state.version = max(self.state.version, self.store.latest_version())
        self._good, self._since_good = self._snapshot(), []
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
        before = self._snapshot()
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
        try:
            batch = self.drainer.drain(idle_block_ms=100)
        except redis.RedisError as exc:
            reading.failed(exc)
            return None
        if reading.failures:
            reading.succeeded()
        return batch

    # -- the work ------------------------------------------------------------------------

    def train_step(self, batch: Batch) -> None:
        """One step, scored before it learns; a non-finite outcome undoes it."""
        self.writes.unacked += batch.done  # acknowledged at the next durable point, either way
        if not batch.n:  # only unusable entries, dead-lettered when read
            return
        logs = self._fit(batch.x, batch.y, batch.w)
        loss = float(logs["loss"])
        if not self._finite(logs):
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
        self._since_good.append(batch)
        if len(self._since_good) >= _REPLAY_MAX:
            self._mark_good()

    def publish(self) -> None:
        """Publish the current weights as a new version; non-finite weights never leave.
        When Redis refuses, training goes on and `_tick` tries again after the backoff."""
        arrays = models.get_arrays(self.model)
        try:
            codec.check_fits(arrays, self.spec)
        except WeightsError as exc:
            self._back_to_good(f"refused to publish: {exc}")
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
        if self.checkpoints is None or not self._mark_good():
            return
        arrays = dict(zip(self._names, self._good, strict=True))
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

    def _finite(self, logs: dict[str, float]) -> bool:
        if not math.isfinite(logs["loss"]):
            return False
        flag = logs.get(models.FINITE)
        return flag >= 1.0 if flag is not None else models.all_finite(self._snapshot())

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

    def _snapshot(self) -> list[np.ndarray]:
        return models.snapshot(self._variables)

    def _mark_good(self) -> bool:
        """Make the current variables the rollback point; False (and undone) if not finite."""
        values = self._snapshot()
        if not models.all_finite(values):
            self._back_to_good("non-finite variables")
            return False
        self._good, self._since_good = values, []
        return True

    def _back_to_good(self, reason: str) -> None:
        """Past the per-step checks (a bug if it happens): no culprit to name, no replay."""
        log.error("%s at step %d; back to the last good snapshot", reason, self.state.step)
        models.restore(self._variables, self._good)
        self._since_good = []
        self.state.rollbacks += 1

    def _undo(self, batch: Batch, reason: str) -> None:
        """Back to the variables before `batch`: the last good snapshot plus a replay."""
        log.warning("undoing a step and dead-lettering its %d samples: %s", batch.n, reason)
        models.restore(self._variables, self._good)
        for i, good in enumerate(self._since_good):
            if not self._finite(self._fit(good.x, good.y, good.w)):  # replays are deterministic
                log.error("replay diverged at %d of %d", i, len(self._since_good))
                self._mark_good()
                break
        self.state.rollbacks += 1
        self.state.dead_lettered += batch.n
        detail = {
            "entries": [e.decode() for e in batch.entries],
            "x": batch.x[: min(batch.n, 8)].tolist(),  # the dead letter keeps ~1 KiB anyway
            "y": batch.y[: min(batch.n, 8)].reshape(-1).tolist(),
        }
        self.writes.deadletter(reason, json.dumps(detail).encode())

    def _resume_checkpoint(self) -> str | None:
        if self.checkpoints is None:
            return None
        try:
            found = self.checkpoints.load()
            if found is None:
                return None
            codec.check_fits(found.arrays, models.training_spec(self.model))
            state = LearnerState.from_json(found.state)
        except (WeightsError, TypeError, ValueError) as exc:
            log.warning(
                "checkpoint %s unusable, not resuming from it: %s", self.checkpoints.path, exc
            )
            return None
        values, lr = dict(found.arrays), "optimizer/learning_rate"
        if lr in values:  # the configured learning rate wins over the saved one
            values[lr] = models.snapshot([self._variables[self._names.index(lr)]])[0]
        models.restore(self._variables, [values[k] for k in self._names])
        self.state = state
        return f"resumed from checkpoint {self.checkpoints.path}"

    def _resume_published(self) -> str | None:
        found = self.store.fetch(self.store.latest_version())
        if found is None:
            return None
        try:
            arrays, meta = codec.decode(found[1])
            if meta.get("variant", BASE_VARIANT) != self.variant:
                raise WeightsError(f"they are variant {meta.get('variant')!r}'s")
            codec.check_fits(arrays, self.spec)
            step, seen = int(meta.get("step", 0)), int(meta.get("samples_seen", 0))
        except (WeightsError, ValueError) as exc:
            log.warning("latest weights v%d unusable, starting fresh: %s", found[0], exc)
            return None
        models.set_arrays(self.model, arrays)
        self.state.step, self.state.samples_seen = step, seen
        return f"resumed from published weights v{found[0]}"


def _ema(prev: float | None, value: float, rate: float) -> float:
    return value if prev is None else prev + rate * (value - prev)
