"""Several replayed steps in one compiled call: the replay's steps at a fraction of the cost.

A training step of a small model costs the learner almost nothing to compute and a lot to
call (the compiled function's dispatch, its inputs' conversion, the logs' copies back),
the same at 16 rows as at 256. Between two messages of a live stream the learner replays
`replay_ratio` samples per fresh one in such steps; paying the call for each, a learner
sharing its cores with the service's other workers replayed far fewer than the in-process
loop, and served a model that had learned less.

So the replay's steps go `STEPS` at a time through one compiled function: a loop over
`STEPS` batches stacked, each step the model's own `train_step` (the trace probe's, which
zeroes the metrics and adds the `finite` flag: `guard.TrainProbe`), compiled by XLA as
the learner's step is. The same batches, drawn in the same order, in the same steps: only
the call is shared. The function is traced and compiled at warm-up, for the replay's
batch size.

The logs are those of the last step; its `finite` flag covers every step, as a non-finite
step leaves non-finite weights behind. TensorFlow on one device only (`of`): elsewhere
(JAX, PyTorch, a mirrored or multi-worker learner) every replayed step is a call.

What was measured (the call's cost, the gain through the service, the compile time):
docs/learning-log.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np

STEPS = 8  # replayed steps per call


class MultiStep:
    """`STEPS` training steps of one model in one compiled call."""

    def __init__(self, model: keras.Model) -> None:
        import tensorflow as tf

        rate = model.optimizer.learning_rate

        def steps(x, y, w, rates):
            rate.assign(rates[0])
            logs = model.train_step((x[0], y[0], w[0]))
            for i in tf.range(1, STEPS):
                rate.assign(rates[i])
                logs = model.train_step((x[i], y[i], w[i]))
            return logs

        self._tf, self._rate = tf, rate
        self._steps = tf.function(steps, jit_compile=bool(model.jit_compile))

    @classmethod
    def of(cls, model: keras.Model, replicas: int, collective: object | None) -> MultiStep | None:
        """One for `model`'s learner where the backend allows; None elsewhere."""
        if keras.backend.backend() != "tensorflow" or replicas > 1 or collective is not None:
            return None
        if not isinstance(model.optimizer.learning_rate, keras.Variable):
            return None  # a schedule: no rate of the learner's to write
        return cls(model)

    def trace(self, rows: int, sample_shape: tuple[int, ...], y_tail: tuple[int, ...]) -> None:
        """Trace and compile it for batches of `rows` (at warm-up: the variables it moves
        with zero sample weights are the caller's to restore)."""
        shape = (STEPS, rows)
        rate = float(keras.ops.convert_to_numpy(self._rate))
        x = np.zeros((*shape, *sample_shape), np.float32)
        self(
            x, np.zeros((*shape, *y_tail), np.float32), np.zeros(shape, np.float32), [rate] * STEPS
        )

    def __call__(
        self, x: np.ndarray, y: np.ndarray, w: np.ndarray, rates: Sequence[float]
    ) -> dict[str, np.ndarray | float]:
        """`STEPS` steps, on `x[i]`, `y[i]`, `w[i]` at learning rate `rates[i]` in turn
        (`stepsize.StepSize.replayed`): the last one's logs."""
        constant = self._tf.constant
        logs = self._steps(constant(x), constant(y), constant(w), constant(rates, "float32"))
        return {k: np.asarray(v) if np.ndim(v) else float(v) for k, v in logs.items()}
