"""The multi-host learner's collective operations, on TensorFlow's MultiWorkerMirroredStrategy.

`learner.distribute = "multi_worker"` runs one learner process per host (a *worker*); the
cluster is described by `TF_CONFIG`, as for any TensorFlow multi-worker job
(`tfconfig.Workers`).
Every step is synchronous: each worker computes the gradient of its share of the batch,
the strategy all-reduces them, and every worker applies the same update to its copy of
the variables, which stay identical (`Collective.fit`).

Keras 3's `train_on_batch` fails under this strategy with two workers or more (TF 2.21,
Keras 3.15: `Invalid reduction dimension 0` in its metric reduction, tensorflow#72388), so
the step is written here with the public API: a `GradientTape` over the model's own
`compute_loss` (which already divides by the replicas in sync) and `optimizer.apply`
(which all-reduces the gradients). Its logs are those of `train_on_batch`: the loss and
the built-in metric of the batch with the weights from before its update, and the
`finite` flag (`streamlearn.online.guard.FINITE`).

A worker that stops taking part (stopped, hung, cut off) would block every other in its
next collective for good: each collective here is watched (`Watchdog`), and one that waits
`Workers.timeout_s` (`STREAMLEARN_COLLECTIVE_TIMEOUT_S`, default 60 s) is aborted, which
ends this worker with a `WorkerLost`. While the workers start (resume, then trace every
batch bucket, which takes each its own time) a collective waits at least `STARTING_S`
(`Collective.starting`). Before any step, the workers compare how many devices each
trains on (`tfconfig.check_replicas`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np

from streamlearn.config.app import ModelConfig
from streamlearn.config.tfconfig import TIMEOUT_ENV, Workers, check_replicas
from streamlearn.errors import StreamlearnError
from streamlearn.online import hedge, network, tensors
from streamlearn.online.guard import FINITE, all_finite_tensor

log = logging.getLogger(__name__)

# The group of the device-count check: one CPU device a worker, whatever each trains on;
# far above the keys the strategy hands out (1, 2, 3...)
_CHECK_GROUP = 1 << 30

# How long a collective may wait while the workers start: each resumes and traces its
# buckets at its own pace, seconds apart on a loaded host, minutes apart on a cold one
STARTING_S = 300.0


class Collective:
    """The collective step and exchanges of one worker (all of them call each in turn)."""

    def __init__(self, strategy: Any, model: keras.Model, cfg: ModelConfig) -> None:
        import tensorflow as tf

        # it logs every collective it builds at INFO: each turn's exchange, the whole log
        logging.getLogger("tensorflow").setLevel(logging.WARNING)
        self.strategy = strategy
        self.replicas = strategy.num_replicas_in_sync
        workers = Workers.from_env()
        self.workers = workers.count
        self.watchdog = Watchdog(workers.timeout_s)
        check_replicas(self._replica_counts(workers))
        self.traces = 0  # of the step, as `guard.TrainProbe` counts them
        metric = None if cfg.factory else network.head_metric(cfg.task)
        per_row = hedge.PER_ROW_METRICS.get(metric) if metric else None
        variables = [*model.trainable_variables, *model.optimizer.variables]
        heads = hedge.find(model) is not None  # then each head's loss too, for Hedge

        def step(x: Any, y: Any, w: Any) -> dict[str, Any]:
            self.traces += 1  # Python runs here only while tracing
            ctx = tf.distribute.get_replica_context()
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                loss = model.compute_loss(x, y, pred, w)  # divided by the replicas
            grads = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply(grads, model.trainable_variables)
            if per_row is None:
                logs = {"loss": ctx.all_reduce("sum", loss)}
            else:  # the metric's weighted mean over every worker's rows; one all-reduce
                assert metric is not None  # `per_row` is a metric's
                w = tf.cast(w, "float32")
                hits = tf.reduce_sum(w * tf.reshape(per_row(y, hedge.served(pred)), [-1]))
                sums = [loss, hits, tf.reduce_sum(w)]
                if heads:
                    sums.append(hedge.head_loss_sums(model.loss.base, y, pred, w))
                loss, hits, weight, *per_head = ctx.all_reduce("sum", sums)
                logs = {"loss": loss, metric: tf.math.divide_no_nan(hits, weight)}
                if heads:
                    logs[hedge.HEAD_LOSSES] = tf.math.divide_no_nan(per_head[0], weight)
            return {**logs, FINITE: all_finite_tensor(variables)}

        self._step = tf.function(lambda x, y, w: strategy.run(step, args=(x, y, w)))

        def gather(flat: Any) -> Any:
            local = strategy.experimental_distribute_values_from_function(lambda _ctx: flat)
            return strategy.gather(local, axis=0)

        self._gather = tf.function(gather)

    def _replica_counts(self, workers: Workers) -> list[int]:
        """How many devices each worker trains on, in worker order: a gather over one CPU
        device a worker, a group of the same size on every worker whatever the counts
        (unlike the strategy's own groups, of all the devices)."""
        import tensorflow as tf

        mine = tf.constant([len(self.strategy.extended.worker_devices)], tf.int32)
        with self._peers(), tf.device(f"/job:worker/replica:0/task:{workers.index}/device:CPU:0"):
            every = tf.raw_ops.CollectiveGatherV2(
                input=mine,
                group_size=workers.count,
                group_key=_CHECK_GROUP,
                instance_key=1,
                ordering_token=[],
            )
        return [int(n) for n in every.numpy()]

    def fit(self, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, float | np.ndarray]:
        """One synchronous step: replica r trains rows r, r+R, r+2R... of the batch, which
        must be the same on every worker (the learner's batches are: `exchange`)."""
        split = [tensors.split_per_replica(self.strategy, a) for a in (x, y, w)]
        with self._peers():
            out = self._step(*split)
        first = self.strategy.experimental_local_results
        return {k: _host(first(v)[0]) for k, v in out.items()}

    def exchange(self, *arrays: np.ndarray, exact: type = np.float32) -> list[np.ndarray]:
        """Every worker's `arrays` (the same shapes on each, values that `exact` holds
        exactly), stacked along a new first axis in worker order: one collective for all."""
        flat = np.concatenate([np.asarray(a, exact).ravel() for a in arrays])
        with self._peers():
            gathered = self._gather(flat)
        per_worker = self.replicas // self.workers  # each local replica sent the same
        rows = np.asarray(gathered).reshape(self.replicas, flat.size)[::per_worker]
        out, at = [], 0
        for a in arrays:
            size = np.asarray(a).size
            part = rows[:, at : at + size].reshape(len(rows), *np.shape(a))
            out.append(part.astype(np.asarray(a).dtype))
            at += size
        return out

    def starting(self) -> contextlib.AbstractContextManager[None]:
        """The span of the workers' start, in which a collective waits at least
        `STARTING_S` for the others."""
        return self.watchdog.patient(STARTING_S)

    def from_chief(self, values: list[np.ndarray]) -> list[np.ndarray]:
        """The chief's `values` on every worker (a resumed state, counters)."""
        return [every[0] for every in self.exchange(*values, exact=np.float64)]

    @contextlib.contextmanager
    def _peers(self) -> Iterator[None]:
        """A collective that failed (a worker died or cannot be reached) or waited too
        long (`Watchdog`) ends this worker too, with a `WorkerLost` rather than
        TensorFlow's traceback."""
        import tensorflow as tf

        try:
            with self.watchdog.watching():
                yield
        except tf.errors.OpError as exc:
            if self.watchdog.fired:
                why = (
                    f"no answer from the other learner workers within "
                    f"{self.watchdog.waited_s:g} s ({TIMEOUT_ENV}): one of them is stopped, "
                    "hung or cut off"
                )
            else:
                first = str(exc.message).strip().splitlines()[0]
                why = "a collective with the other learner workers failed"
                why += f" ({type(exc).__name__}: {first})"
            raise WorkerLost(
                f"{why}; every worker must start again, and they resume together from the "
                "chief's checkpoint or published weights"
            ) from None


class Watchdog:
    """Aborts this process's collectives once one has waited `timeout_s`: a peer that
    stopped taking part would otherwise block it for good (TensorFlow's own peer check
    sees only a peer that does not answer at all, and takes up to about a minute).

    One thread for the process, which sleeps until the deadline of the collective in
    flight, or `timeout_s` while none is: a collective started meanwhile has a later
    deadline. TensorFlow's own per-collective timeout starts a thread per collective, a few
    each turn, each sleeping the whole timeout.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.floor_s = 0.0  # a longer wait allowed for now (`patient`)
        self.fired = False
        self.waited_s = timeout_s  # how long the collective it aborted waited
        self._shortened = threading.Event()  # the patience ended: deadlines came nearer
        self._since: float | None = None  # when the collective in flight started
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, name="collective-watchdog", daemon=True).start()

    @property
    def limit_s(self) -> float:
        return max(self.timeout_s, self.floor_s)

    @contextlib.contextmanager
    def patient(self, floor_s: float) -> Iterator[None]:
        """Collectives within wait at least `floor_s`."""
        self.floor_s = floor_s
        try:
            yield
        finally:
            self.floor_s = 0.0
            self._shortened.set()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        with self._lock:
            self._since = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._since = None

    def _watch(self) -> None:
        while True:
            with self._lock:
                since = self._since
                # idle, it sleeps the base timeout: a collective started meanwhile has a
                # later deadline, however patient the watchdog is when it starts
                limit = self.limit_s
                left = self.timeout_s if since is None else since + limit - time.monotonic()
                self.fired = left <= 0
            if not self.fired:
                self._shortened.wait(left)
                self._shortened.clear()
                continue
            self.waited_s = limit
            log.error("a collective waited %g s for the other workers", limit)
            self._abort()
            return

    def _abort(self) -> None:
        """The abort MultiWorkerMirroredStrategy's own peer check makes (there is no public
        API): every pending and later collective of this process fails at once."""
        import tensorflow as tf
        from tensorflow.python.eager import context

        context.context().abort_collective_ops(
            tf.errors.DEADLINE_EXCEEDED,
            f"no answer from the other learner workers within {self.waited_s:g} s",
        )


class WorkerLost(StreamlearnError):
    """Another worker of the multi-host learner died or cannot be reached."""


def _host(value: Any) -> float | np.ndarray:
    """A log's value on the host: a float, or an array (a hedge model's head losses)."""
    found = np.asarray(value, np.float64)
    return float(found) if found.ndim == 0 else found
