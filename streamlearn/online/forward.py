"""A model's compiled forward pass, as the actors serve it.

Serving pads each batch to the next bucket size (`streamlearn.online.buckets`), so a forward pass
compiled (and warmed up) once per bucket at start never traces again while serving.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np


class Forward:
    """A model's forward pass, compiled once for any batch size.

    On TensorFlow a concrete function of `model(x)`: it cannot retrace and costs half of
    `predict_on_batch` per call (no distribution-strategy wrapper). Other backends use
    `predict_on_batch`, which the padding to bucket sizes keeps from retracing. A model of
    several outputs gives a list of arrays.
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
            self._call = lambda x: concrete(tf.constant(x))
            self.traces = function.experimental_get_tracing_count

    def __call__(self, x: np.ndarray) -> np.ndarray | list[np.ndarray]:
        out = self._call(x)
        if isinstance(out, list | tuple):
            return [np.asarray(o) for o in out]
        return np.asarray(out)
