"""A Keras model's compiled forward pass: the learner's served prediction, and what a
TensorFlow actor serves (`actor.runtime = "tensorflow"`; a built-in model is served without
TensorFlow, by `streamlearn.online.numpy_model`).

Given bucket sizes (`streamlearn.online.buckets`), each batch is padded to the next one,
and each is traced (warmed up) at once, so that serving never traces again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import keras
import numpy as np

from streamlearn.online import buckets as padding
from streamlearn.online import tensors


class Forward:
    """A model's forward pass, compiled once for any batch size.

    On TensorFlow a concrete function of `model(x)`: it cannot retrace and costs half of
    `predict_on_batch` per call (no distribution-strategy wrapper). Other backends use
    `predict_on_batch`, which the padding to bucket sizes keeps from retracing. A model of
    several outputs gives a list of arrays.
    """

    def __init__(
        self,
        model: keras.Model,
        sample_shape: tuple[int, ...],
        buckets: tuple[int, ...] | None = None,
    ) -> None:
        self.model = model
        self.spec = tensors.spec(model)  # what `load` takes (`codec.check_fits`)
        self.buckets = buckets
        self._call = model.predict_on_batch
        self.traces: Callable[[], int] | None = None
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            spec = tf.TensorSpec((None, *sample_shape), tf.float32)
            function = tf.function(lambda x: model(x, training=False), input_signature=[spec])
            concrete = function.get_concrete_function()
            self._call = lambda x: concrete(tf.constant(x))
            self.traces = function.experimental_get_tracing_count
        for size in buckets or ():
            self(np.zeros((size, *sample_shape), np.float32))

    def load(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Serve `arrays` (validated against `spec` first: `codec.check_fits`)."""
        tensors.set_arrays(self.model, dict(arrays))

    def __call__(self, x: np.ndarray) -> np.ndarray | list[np.ndarray]:
        n = len(x)
        if self.buckets is not None:
            x = padding.pad(x, padding.fit(self.buckets, n))
        out = self._call(x)
        if isinstance(out, list | tuple):
            return [np.asarray(o)[:n] for o in out]
        return np.asarray(out)[:n]


class Features:
    """What a head set from the replay buffer reads of the whole buffer at each setting
    (`linear`, `memory`: the standardised inputs, a sub-model of the network): called
    eagerly until `compile` (the learner's warm-up), then as a `Forward`. Eagerly, Keras's
    own work per call was most of it: ~0.8 ms for 500 rows of 9 inputs, ~0.25 compiled,
    at each of the demo model's publishes, for each head. The same numbers to the bit (a
    test holds it)."""

    def __init__(self, model: keras.Model) -> None:
        self.model = model
        self._forward: Forward | None = None

    def compile(self, sample_shape: tuple[int, ...]) -> None:
        """Traced now, on TensorFlow; on other backends, eager still (their compiled pass
        traces each batch size, and the buffer's grows)."""
        if keras.backend.backend() == "tensorflow":
            self._forward = Forward(self.model, sample_shape)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self._forward is None:
            return np.asarray(self.model(x, training=False))
        return np.asarray(self._forward(x))
