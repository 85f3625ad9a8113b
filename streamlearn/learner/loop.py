"""The learner: drains micro-batches from the sample stream into training steps.

Its parts, each on a screen of its own:
- `streamlearn.online.trainer.Trainer` (built by `step`): the step on padded batches,
  test-then-train figures, the guard against non-finite steps;
- `durability.Durability`: publishes and checkpoints, and acknowledges entries only once
  the state that learned them is durable; a restart resumes from that state;
- `reporting.Reporter`: the status, the metrics and the promotion between variants;
- `writes.LearnerWrites`: every write to Redis, retried after a backoff, never fatal;
- `lease.LeaseKeeper`: the lease that lets this learner alone publish (checked each turn).

This module wires them to the stream (`batching.Drainer`, read ahead by a `Prefetcher`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

import keras

from streamlearn.config.app import BASE_VARIANT, ModelConfig
from streamlearn.config.policies import LearnerConfig
from streamlearn.errors import ConfigError
from streamlearn.learner.batching import Drainer, Prefetcher
from streamlearn.learner.durability import Durability
from streamlearn.learner.lease import LeaseKeeper
from streamlearn.learner.reporting import Reporter, StatusSink
from streamlearn.learner.step import build_trainer
from streamlearn.learner.variants import Promoter
from streamlearn.learner.writes import LearnerWrites
from streamlearn.online.batch import Batch
from streamlearn.store.partitions import PartitionedStream
from streamlearn.store.stream import SampleStream
from streamlearn.store.weights import WeightsStore

log = logging.getLogger(__name__)

REPLAY_SLICE_S = 0.002  # replayed steps back to back before the stream is read again


class Learner:
    """Trains one model (or one variant of it) on its sample stream and publishes its
    weights."""

    def __init__(
        self,
        cfg: ModelConfig,
        sample_queue: SampleStream | PartitionedStream,
        store: WeightsStore,
        *,
        consumer: str = "learner",
        status: StatusSink | None = None,
        clock: Callable[[], float] = time.monotonic,
        variant: str = BASE_VARIANT,
        promoter: Promoter | None = None,
        lease: LeaseKeeper | None = None,
    ) -> None:
        """`cfg` is the variant's (`ModelConfig.variant`); `promoter` its place among the
        model's variants, None for a model without any; `lease` the one it holds (None:
        not fenced: tests, benches), which its store's publishes carry."""
        self.cfg = cfg
        self.variant = variant
        self.promoter = promoter
        self.policy = policy = cfg.learner
        self.queue = sample_queue
        self.store = store
        self.consumer = consumer
        self.clock = clock
        self.writes = LearnerWrites(sample_queue, store, policy)
        self.trainer = build_trainer(cfg, self.writes.deadletter)
        self.trainer.heads_in_replay = False  # set as it publishes (`Durability.publish`)
        self.durability = Durability(cfg, variant, self.trainer, store, self.writes, clock)
        self.lease = lease
        if lease is not None:
            self.durability.fence = lease.check  # no checkpoint without the lease
        self.reporter = Reporter(
            cfg,
            variant,
            self.trainer,
            self.writes,
            status,
            promoter,
            unpublished=lambda: self.durability.steps_since_publish,
            lease=lease,
        )
        self.y_tail = () if cfg.task == "multiclass" else (1,)
        self.drainer, self.prefetcher = self.reader(policy, self.trainer.buckets)
        self._last_status = clock()
        self.heartbeat: Callable[[], object] = lambda: (
            None
        )  # each turn (`streamlearn.observe.health`)
        # called once every step is traced (`warm_up`: the larger ones in spare time,
        # while the first samples are learned already): the worker's ready line
        self.traced: Callable[[], object] | None = None

    # the parts tests and benches look at
    model = property(lambda self: self.trainer.model)
    state = property(lambda self: self.trainer.state)
    buckets = property(lambda self: self.trainer.buckets)
    probe = property(lambda self: self.trainer.probe)
    replicas = property(lambda self: self.trainer.replicas)

    def reader(
        self, policy: LearnerConfig, buckets: tuple[int, ...]
    ) -> tuple[Drainer, Prefetcher | None]:
        """The stream's batches of up to `policy.max_batch` samples, read ahead."""
        drainer = Drainer(
            self.queue,
            self.consumer,
            policy,
            buckets,
            self.y_tail,
            stale_after_ms=int(max(30.0, 3 * self.durability.every_s) * 1000),
            deadletter=self.writes.deadletter,
        )
        depth = policy.prefetch_depth()
        return drainer, Prefetcher(drainer.drain, depth, self.writes.reading) if depth else None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Resume (checkpoint, else latest weights), take pending entries, trace every
        bucket; with nothing published yet, publish the initial weights first, before the
        traces (seconds): a new model's version 1 is out as soon as it is built."""
        self.queue.ensure_group()
        collective = self.trainer.collective  # the workers start at their own pace
        with collective.starting() if collective else contextlib.nullcontext():
            source = self.resume()
            self.trainer.guard.reset()
            if collective is None and self.store.latest_version() == 0:
                self.publish()  # actors answer from the start, as any online learner does
            pending = self.drainer.resume()
            self.warm_up()
        if collective is not None and self.store.latest_version() == 0:
            self.publish()  # the workers trace in lockstep first
        log.info(
            "learner %s: %s, step %d, %d entries pending, devices %s, %d traces for buckets %s",
            self.cfg.name,
            source,
            self.state.step,
            pending,
            keras.distribution.list_devices(),
            self.trainer.warm_traces,
            list(self.buckets),
        )

    def resume(self) -> str:
        """The state to go on from (`Durability.resume`); says which."""
        return self.durability.resume()

    def warm_up(self) -> None:
        """Trace the smallest bucket now, the others in spare time (`Trainer.warm_up`; on
        one device: several trace in lockstep); promotion on a metric needs one."""
        self.trainer.warm_up(later=self.trainer.collective is None and self.replicas == 1)
        if self.promoter and self.promoter.rule.on == "metric" and self.trainer.metric_name is None:
            raise ConfigError(
                f"models.{self.cfg.name}.promotion.on: 'metric', but variant {self.variant!r} "
                "compiles no metric; compare on 'loss' or give the model a metric"
            )

    def warm_next(self) -> bool:
        """Trace the next step `warm_up` left (`Trainer.warm_next`), what was learned
        published first: actors do not wait a trace for it. Batches grow to the new
        step's size. False when none is left."""
        if not self.trainer.cold:
            return False
        self.durability.pausing()
        self.trainer.warm_next()
        self._limit()
        return True

    def _limit(self, burst: bool = False) -> None:
        """Batches up to the largest traced step while the larger ones wait for spare
        time: a new model's first samples are learned at once, not after a trace. A
        `burst` has no spare time: its batches trace their steps as they come."""
        traced = self.policy.max_batch if burst else self.trainer.traced_size
        self.drainer.limit = min(self.policy.max_batch, traced)

    def run(
        self, stop: threading.Event | None = None, max_steps: int | None = None, *, burst=False
    ) -> int:
        """Train until `stop` is set, `max_steps` batches ran or, with `burst`, the stream
        has nothing more; returns the number of fresh batches.

        Once it has caught up with the stream (a read found it empty), it replays batches
        from the replay buffer while the budget allows (`replay`; not with `burst`, which
        only drains what is there): under a backlog it trains on fresh batches alone.
        On the way out it publishes and checkpoints what it learned; batches read ahead but
        not trained stay pending (and are trained by the next `run` or the next process).
        """
        stop = stop or threading.Event()
        steps = 0
        self._limit(burst)
        with self.reading():
            while not stop.is_set() and (max_steps is None or steps < max_steps):
                if self.traced is not None and not self.trainer.cold:
                    traced, self.traced = self.traced, None
                    traced()
                spare = not burst and self.trainer.spare() and self._caught_up()
                batch = self.next_batch(spare or (not burst and bool(self.trainer.cold)))
                if batch is not None:
                    self.train_step(batch)
                    steps += 1
                    if batch.n < self.drainer.limit and self.durability.publish_due():
                        # a batch that did not fill came from a stream caught up: time to
                        # spare for the heads set from the buffer as it publishes
                        self.durability.publish(heads=True)
                    elif self.trainer.cold and not burst and batch.n >= self.drainer.limit:
                        self.warm_next()  # a backlog: no spare time coming
                elif burst and self._caught_up():
                    break
                else:
                    if self._caught_up():  # publish what it learned now, then replay
                        self.durability.caught_up()
                    warmed = not burst and self.warm_next()  # spare time: traces first
                    if spare and not warmed:
                        self.replay()
                self._tick()
        self.durability.finish()
        return steps

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """The read-ahead thread runs within (its batches not taken stay for the next)."""
        if self.prefetcher:
            self.prefetcher.start()
        try:
            yield
        finally:
            if self.prefetcher:
                self.prefetcher.stop()
            self.writes.reading.run(self.drainer.land)  # a read sent ahead: into the carry

    def replay(self) -> None:
        """Steps from the replay buffer while its budget allows, back to back for up to
        `REPLAY_SLICE_S`: a read for fresh samples between every two steps cost as much as
        a step (a round trip to Redis), so the replay of a message took about twice as long.
        A fresh batch waits at most a slice (and the step under way)."""
        until = time.monotonic() + REPLAY_SLICE_S
        while self.trainer.replay_step():
            self.durability.trained(0)
            if time.monotonic() >= until:
                return

    def next_batch(self, spare: bool) -> Batch | None:
        """The next fresh batch, waiting for one only when no replay step is due (`spare`)."""
        wait_s = 0.0 if spare else self._idle_wait_s()
        if self.prefetcher:
            return self.prefetcher.get(wait_s)
        return self._drain(round(wait_s * 1000) or None)

    def _caught_up(self) -> bool:
        """Whether the stream had nothing more to read (not merely the read-ahead behind)."""
        return self.prefetcher is None or self.prefetcher.idle.is_set()

    def _idle_wait_s(self) -> float:
        """How long to wait for a fresh batch with no replay to do: 0.1 s, or, caught up,
        until an unpublished step may be published (`Durability.caught_up`)."""
        wait = self.durability.publish_wait_s() if self._caught_up() else None
        return 0.1 if wait is None else wait

    def _drain(self, idle_block_ms: int | None) -> Batch | None:
        """Without read-ahead: a drain in this thread, after the backoff when Redis failed."""
        reading = self.writes.reading
        if not reading.due():
            time.sleep(min(0.1, reading.delay()))
            return None
        return reading.result(lambda: self.drainer.drain(idle_block_ms=idle_block_ms))

    # -- the work ------------------------------------------------------------------------

    def train_step(self, batch: Batch) -> None:
        """One step, scored before it learns; a non-finite outcome undoes it."""
        self.writes.unacked += batch.done  # acknowledged at the next durable point, either way
        if batch.n and self.trainer.step(batch):  # none: only unusable entries
            self.durability.trained(batch.n)

    def publish(self) -> None:
        """Publish now; returns once the entries that makes durable are acknowledged (the
        loop's own publishes do not wait: `LearnerWrites.acknowledge`)."""
        self.durability.publish()
        self.writes.acknowledged()

    def checkpoint(self) -> None:
        """Checkpoint now; returns as `publish` does."""
        self.durability.checkpoint()
        self.writes.acknowledged()

    def status(self) -> dict[str, object]:
        return self.reporter.status()

    def metrics(self) -> dict[str, float | int | None]:
        return self.reporter.metrics()

    def report(self, compete: bool = True) -> None:
        """Status to the sink, figures to the promoter (`reporting.Reporter.report`)."""
        self.reporter.report(self.publish, compete)

    def _tick(self) -> None:
        if self.lease is not None:
            self.lease.check()  # LeaseLost: out of the loop, nothing more published
        self.heartbeat()
        self.writes.acknowledge()  # before a durable point sends acknowledgements of its own
        self.durability.tick()
        now = self.clock()
        if self.reporter.active and (now - self._last_status) * 1000 >= self.policy.status_every_ms:
            self._last_status = now
            self.report()
