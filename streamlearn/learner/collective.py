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
`finite` flag (`models.FINITE`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np

from streamlearn.config import ModelConfig
from streamlearn.config.tfconfig import Workers
from streamlearn.errors import StreamlearnError
from streamlearn.nn import networks

# The per-row form of each built-in head's metric (`models._HEADS`), by its log name.
_METRICS = {
    "mae": keras.metrics.mean_absolute_error,
    "binary_accuracy": keras.metrics.binary_accuracy,
    "sparse_categorical_accuracy": keras.metrics.sparse_categorical_accuracy,
}


class Collective:
    """The collective step and exchanges of one worker (all of them call each in turn)."""

    def __init__(self, strategy: Any, model: keras.Model, cfg: ModelConfig) -> None:
        import tensorflow as tf

        # it logs every collective it builds at INFO: each turn's exchange, the whole log
        logging.getLogger("tensorflow").setLevel(logging.WARNING)
        self.strategy = strategy
        self.replicas = strategy.num_replicas_in_sync
        self.workers = Workers.from_env().count
        self.traces = 0  # of the step, as `models.TrainProbe` counts them
        metric = None if cfg.factory else networks.head_metric(cfg.task)
        per_row = _METRICS.get(metric) if metric else None
        variables = [*model.trainable_variables, *model.optimizer.variables]

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
                w = tf.cast(w, "float32")
                hits = tf.reduce_sum(w * tf.reshape(per_row(y, pred), [-1]))
                loss, hits, weight = ctx.all_reduce("sum", [loss, hits, tf.reduce_sum(w)])
                logs = {"loss": loss, metric: tf.math.divide_no_nan(hits, weight)}
            return {**logs, networks.FINITE: networks.all_finite_tensor(variables)}

        self._step = tf.function(lambda x, y, w: strategy.run(step, args=(x, y, w)))

        def gather(flat: Any) -> Any:
            local = strategy.experimental_distribute_values_from_function(lambda _ctx: flat)
            return strategy.gather(local, axis=0)

        self._gather = tf.function(gather)

    def fit(self, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, float]:
        """One synchronous step: replica r trains rows r, r+R, r+2R... of the batch, which
        must be the same on every worker (the learner's batches are: `exchange`)."""
        split = [networks.split_per_replica(self.strategy, a) for a in (x, y, w)]
        with self._peers():
            out = self._step(*split)
        first = self.strategy.experimental_local_results
        return {k: float(first(v)[0]) for k, v in out.items()}

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

    def from_chief(self, values: list[np.ndarray]) -> list[np.ndarray]:
        """The chief's `values` on every worker (a resumed state, counters)."""
        return [every[0] for every in self.exchange(*values, exact=np.float64)]

    @contextlib.contextmanager
    def _peers(self) -> Iterator[None]:
        """A collective that failed (a worker died or cannot be reached) ends this worker
        too, with a `WorkerLost` rather than TensorFlow's traceback."""
        import tensorflow as tf

        try:
            yield
        except tf.errors.OpError as exc:
            first = str(exc.message).strip().splitlines()[0]
            raise WorkerLost(
                f"a collective with the other learner workers failed "
                f"({type(exc).__name__}: {first}); every worker must start again, and they "
                "resume together from the chief's checkpoint or published weights"
            ) from None


class WorkerLost(StreamlearnError):
    """Another worker of the multi-host learner died or cannot be reached."""
