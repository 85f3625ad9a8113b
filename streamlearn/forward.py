"""The actor's compiled forward pass and the padded batch sizes it is warmed up for.

Serving pads each batch to the next bucket size, so a forward pass compiled (and warmed
up) once per bucket at start never traces again while serving.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np


def bucket_sizes(max_batch: int) -> tuple[int, ...]:
    """Padded batch sizes: powers of 4 below `max_batch`, then `max_batch`.

    >>> bucket_sizes(64), bucket_sizes(100), bucket_sizes(1)
    ((1, 4, 16, 64), (1, 4, 16, 64, 100), (1,))
    """
    sizes, size = [], 1
    while size < max_batch:
        sizes.append(size)
        size *= 4
    return (*sizes, max_batch)


class Forward:
    """A model's forward pass, compiled once for any batch size.

    On TensorFlow a concrete function of `model(x)`: it cannot retrace and costs half of
    `predict_on_batch` per call (no distribution-strategy wrapper). Other backends use
    `predict_on_batch`, which the padding to bucket sizes keeps from retracing.
    """

    def __init__(self, model: keras.Model, sample_shape: tuple[int, ...]) -> None:
        self.model = model
        self._call = model.predict_on_batch
        self.traces: Callable[[], int] | None = None
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            spec = tf.TensorSpec((None, *sample_shape), tf.float32)
            function = tf.function(lambda x: model(x, training=False), input_signature=[spec])
            concrete = function.get_concrete_function()
            self._call = lambda x: concrete(tf.constant(x)).numpy()
            self.traces = function.experimental_get_tracing_count

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self._call(x))
