"""One worker of the multi-host learner (`learner.distribute = "multi_worker"`): the
learner's loop, in lockstep with the other workers.

Each worker reads its own partitions of the stream (`tfconfig.Workers.partitions`), in the model's
consumer group, up to its share of `max_batch` a turn. Every turn the workers exchange
what they read, with a few flags (`Collective.exchange`), so that each holds the same
batch: every worker's rows, in worker order, at most `max_batch`. Every worker then runs
the same `Trainer.step` on it, whose gradient is split over the workers and all-reduced
(`Collective.fit`): the input statistics, the replay buffer, the online figures and the
guard see the same batch everywhere and stay identical with no protocol of their own. A
turn in which no worker read anything trains nothing (an empty step would still move an
optimizer with momentum).

The chief (worker 0) alone publishes, checkpoints and reports status. Another worker
acknowledges its entries once the chief says, in the next exchange, that the state which
learned them is durable (`Follower`), so a crash anywhere loses nothing. A worker that
dies fails the others at their next exchange (TensorFlow raises `UnavailableError`), one
that stops taking part at the collective timeout (`collective.Watchdog`), and they exit:
restarted (compose's `restart:`, a Kubernetes Job), they resume together from the chief's
checkpoint or published weights and read their pending entries again.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import astuple, fields
from typing import Any

import numpy as np

from streamlearn.config.app import ModelConfig
from streamlearn.config.tfconfig import Workers
from streamlearn.errors import ConfigError
from streamlearn.learner.loop import Learner
from streamlearn.learner.writes import LearnerWrites
from streamlearn.online import tensors
from streamlearn.online.batch import Batch, padded
from streamlearn.online.figures import LearnerState
from streamlearn.store.partitions import PartitionedStream
from streamlearn.store.stream import SampleStream
from streamlearn.store.weights import WeightsStore

log = logging.getLogger(__name__)

# What each worker sends every turn, by position: its rows, whether it stops, whether it
# has caught up with its partitions, whether it has entries to acknowledge; the chief's:
# a durable point, a new rollback point, a return to its rollback point.
ROWS, STOP, CAUGHT_UP, UNACKED, DURABLE, MARKED, BACK = range(7)


class LockstepLearner(Learner):
    """A `Learner` whose every step is taken with the other workers of `workers`; its
    `queue` is this worker's partitions of the stream."""

    def __init__(
        self,
        cfg: ModelConfig,
        queue: SampleStream | PartitionedStream,
        store: WeightsStore,
        *,
        workers: Workers,
        **kwargs: Any,
    ) -> None:
        """As `Learner`; `queue` is this worker's partitions (`Workers.partitions`)."""
        super().__init__(cfg, queue, store, **kwargs)
        self.workers = workers
        self.collective = self.trainer.collective
        # every worker sets the heads in its replay, as they all replay: the chief alone
        # publishes, so heads set as it publishes would be its own
        self.trainer.heads_in_replay = True
        if self.collective is None:
            raise ConfigError("learner.distribute: a lockstep learner needs 'multi_worker'")
        self.share = -(-self.policy.max_batch // workers.count)  # rows read a turn, at most
        local = self.policy.model_copy(update={"max_batch": self.share, "buckets": None})
        self.drainer, self.prefetcher = self.reader(local, (self.share,))
        self._held: Batch | None = None  # read, then a stop came before its step
        # the chief's durable points, rollback points and returns to one, as last sent:
        # the others ack at the first, make the second too (so that an undo replays the
        # same steps everywhere) and take the chief's variables after the third
        self._sent = self._events()
        self._others_settled = False  # the chief: another's dead letters may be acked
        if not workers.chief:
            self.durability = Follower(self.writes)  # type: ignore[assignment]

    def _events(self) -> np.ndarray:
        guard = self.trainer.guard
        return np.array([self.writes.durable_points, guard.marks, guard.backs])

    def resume(self) -> str:
        """The chief's state, on every worker: its variables and counters."""
        source = super().resume()
        state = self.trainer.state
        counters = np.array([np.nan if v is None else v for v in astuple(state)], np.float64)
        (counters,) = self._chiefs_variables(counters)
        kinds = [f.name for f in fields(LearnerState)]
        self.trainer.state = LearnerState(
            **{  # type: ignore[arg-type]
                k: None if np.isnan(v) else (float(v) if k.startswith("online") else int(v))
                for k, v in zip(kinds, counters, strict=True)
            }
        )
        if not self.workers.chief:
            return f"worker {self.workers.index} of {self.workers.count}, from the chief"
        return f"chief of {self.workers.count} workers, {source}"

    def _chiefs_variables(self, *also: np.ndarray) -> list[np.ndarray]:
        """Every worker takes the chief's training variables (and the `also` arrays,
        returned); the same collective on each."""
        variables = self.trainer.variables
        values = self.collective.from_chief([*tensors.snapshot(variables), *also])
        tensors.restore(variables, values[: len(variables)])
        return values[len(variables) :]

    def run(
        self, stop: threading.Event | None = None, max_steps: int | None = None, *, burst=False
    ) -> int:
        """As `Learner.run`, each turn with every worker: a stop anywhere (a signal,
        `max_steps`, with `burst` every worker caught up with nothing read) stops all."""
        stop = stop or threading.Event()
        steps = 0
        with self.reading():
            while True:
                spare = not burst and self.trainer.spare() and self._caught_up()
                batch = self._held or self.next_batch(spare)
                self._held = None
                ending = stop.is_set() or (max_steps is not None and steps >= max_steps)
                rows, flags = self._exchange(batch, ending)
                if flags[:, STOP].any() or (
                    burst and flags[:, CAUGHT_UP].all() and not flags[:, ROWS].any()
                ):
                    self._held = batch
                    break
                if batch is not None:
                    self.writes.unacked += batch.done
                if flags[:, ROWS].any():
                    self._step(rows, flags[:, ROWS], batch)
                    steps += 1
                elif flags[:, CAUGHT_UP].all():
                    self.durability.caught_up()
                    if not burst:
                        self.replay()  # its decision and shape are the same on every worker
                self._tick()
        self.durability.finish()
        self._exchange(None, True)  # the others learn whether the chief's last state is durable
        return steps

    def _exchange(self, batch: Batch | None, stop: bool) -> tuple[list, np.ndarray]:
        """Every worker's rows and flags; a follower acknowledges what the chief made
        durable since the last exchange."""
        n = batch.n if batch is not None else 0
        x = np.zeros((self.share, *self.cfg.sample_shape), np.float32)
        y = np.zeros((self.share, *self.y_tail), np.float32)
        if n:
            assert batch is not None  # n is its size
            x[:n], y[:n] = batch.x[:n], batch.y[:n]
        events = self._events()
        chiefs = events != self._sent if self.workers.chief else np.zeros(3, bool)
        chiefs[0] |= self._others_settled
        self._sent = events
        unacked = bool(self.writes.unacked)
        flags = np.array([n, stop, self._caught_up(), unacked, *chiefs], np.int64)
        xs, ys, every = self.collective.exchange(x, y, flags)
        if every[0, BACK]:  # rare (a refused publish): the chief's state, made the point
            self._chiefs_variables()
            self.trainer.guard.reset()
        elif every[0, MARKED] and not self.workers.chief:
            self.trainer.guard.mark()
        if self.workers.chief:
            # another's entries that trained nothing (dead letters) wait for no new state
            self._others_settled = bool(every[1:, UNACKED].any()) and self.durability.settled()
        elif every[0, DURABLE]:
            self.writes.made_durable()
        return list(zip(xs, ys, strict=True)), every

    def _step(self, rows: list, counts: np.ndarray, batch: Batch | None) -> None:
        """A step on every worker's rows; this worker's entries are those it completes."""
        real = [(x[:k], y[:k].reshape(k)) for (x, y), k in zip(rows, counts, strict=True) if k]
        joined = padded([x for x, _ in real], [y for _, y in real], self.buckets, self.y_tail)
        joined.entries = batch.entries if batch is not None else []
        if self.trainer.step(joined):
            self.durability.trained(joined.n)
        # every turn, not at the chief's publishes: the layer's statistics stay the same
        # on every worker
        self.trainer.flush_statistics()


class Follower:
    """A worker other than the chief: it publishes and checkpoints nothing, and its
    entries are acknowledged when the chief's state is durable (`LockstepLearner`)."""

    steps_since_publish = 0

    def __init__(self, writes: LearnerWrites) -> None:
        self.writes = writes

    def resume(self) -> str:
        return "from the chief"

    def trained(self, samples: int) -> None:
        pass

    def caught_up(self) -> None:
        pass

    def publish_wait_s(self) -> float | None:
        return None

    def settled(self) -> bool:
        return True

    def tick(self) -> None:
        self.writes.maybe_trim()

    def finish(self) -> None:
        pass

    def publish(self) -> None:
        pass

    def checkpoint(self) -> None:
        pass
