"""What computes an actor's forward pass: numpy alone, or TensorFlow.

`actor.runtime = "auto"` (the default) serves a built-in architecture with numpy
(`streamlearn.online.numpy_model`: no TensorFlow or Keras in the process) and a model from
a user's `factory`, whose layers only Keras knows, with TensorFlow
(`streamlearn.online.forward`, imported only then). The choice and its reason are in the
actor's log line and its status (`runtime`, `runtime_reason`).

Both give a `Servable`: the weights' expected names and shapes (`spec`), `load(arrays)`,
and a call on rows. The TensorFlow one pads each batch to a bucket size, each traced at
build; numpy has nothing to trace.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np

from streamlearn.config.app import ModelConfig
from streamlearn.online.numpy_model import NumpyModel


class Servable(Protocol):
    """A model an actor serves: weights in, predictions out."""

    spec: dict[str, tuple[tuple[int, ...], np.dtype]]

    def load(self, arrays: Mapping[str, np.ndarray]) -> None: ...

    def __call__(self, x: np.ndarray) -> np.ndarray: ...


Build = Callable[[ModelConfig], Servable]


def choose(cfg: ModelConfig) -> tuple[str, str]:
    """The runtime that serves `cfg` (each of its variants alike), and why."""
    asked = cfg.actor.runtime
    factories = [n for n in cfg.variant_names if cfg.variant(n).factory]
    if asked == "tensorflow":
        return "tensorflow", "actor.runtime = 'tensorflow'"
    if factories:  # (`runtime = "numpy"` with a factory fails the config's validation)
        return "tensorflow", f"variant(s) {factories} come from a factory (Keras layers)"
    if asked == "numpy":
        return "numpy", "actor.runtime = 'numpy'"
    return "numpy", "a built-in architecture: served without TensorFlow"


def builder(runtime: str, buckets: tuple[int, ...]) -> Build:
    """A function that makes a ready model of a config (a variant's) for `runtime`."""
    if runtime == "numpy":
        return lambda cfg: NumpyModel(cfg.spec)

    def tensorflow(cfg: ModelConfig) -> Servable:
        from streamlearn.nn import networks  # TensorFlow: only an actor that asks loads it
        from streamlearn.online.forward import Forward

        return Forward(networks.build_model(cfg), cfg.sample_shape, buckets)  # type: ignore[return-value]

    return tensorflow


def size_threads(runtime: str, cpus: int) -> dict[str, int | str]:
    """The forward pass's thread pools sized to the `cpus` the process may use, before it
    builds a model; what they are, for the status. numpy has none of its own: its BLAS
    library's are sized by `OPENBLAS_NUM_THREADS` (and the like), read as numpy loads
    (`streamlearn.config.cpus.blas_environment`)."""
    if runtime == "numpy":
        blas = os.environ.get("OPENBLAS_NUM_THREADS", "")
        return {"blas_threads": int(blas)} if blas.isdigit() else {}
    from streamlearn.nn import networks  # TensorFlow: only an actor that asks loads it

    return networks.size_thread_pools(cpus)


def starts_answered(cfg: ModelConfig) -> bool:
    """Whether a fresh model of `cfg` predicts something known before any version (a
    built-in one: its prior, `numpy_model.initial`), so that its actor answers from the
    first request, as version 0; a factory's model waits for the learner's first."""
    return cfg.factory is None
