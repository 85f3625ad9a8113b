"""The learning algorithms, as a library: what learns from samples, and nothing of where
they come from. It imports numpy and Keras (the public `keras` API: TensorFlow, JAX or
PyTorch underneath), never Redis, MQTT or the config's pydantic models.

    from streamlearn.online import LearningSpec, ModelSpec, OnlineModel

- the front door: `model` (`OnlineModel`: `learn_one`, `predict_one`, `learn_many`,
  `predict_many`, probabilities, figures, the service's weights blob), `spec` (`ModelSpec`,
  `LearningSpec`: plain values with defaults), `checks` (what every built-in model keeps);
- the model: `network` (the built-in network of a spec, compiled), `trainer` (its
  test-then-train step with everything below), `numpy_model` (its forward pass in numpy
  alone: the TensorFlow-free actor's, a device's), `codec` (its weights as a safetensors
  blob), `tensors` (its variables as named arrays);
- the layers and heads: `standardize`, `encode` (named inputs), `hedge` (the heads on
  every layer and their Hedge mixture), `linear` (head 0 and the steps head solved over the
  replay buffer), `steps` (soft steps of each input), `memory` (a nearest-neighbour head);
- the step: `stepsize`, `multistep` (replayed steps several to a compiled call),
  `replay` (the buffer), `drift` (the detector and what a change resets), `guard`
  (non-finite steps undone);
- the plumbing they share: `batch` and `buckets` (padded steps), `forward` (the compiled
  prediction), `figures` (counters), `evaluate` (progressive validation's scores).

What was measured on the way to each of them, and what was tried and dropped:
docs/learning-log.md. A guide: docs/guides/library.md.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from streamlearn._lazy import exports

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ notices, as backend

if TYPE_CHECKING:
    from streamlearn.online.batch import Batch
    from streamlearn.online.forward import Forward
    from streamlearn.online.model import OnlineModel
    from streamlearn.online.numpy_model import NumpyModel
    from streamlearn.online.spec import LearningSpec, ModelSpec
    from streamlearn.online.trainer import Trainer

__all__, __getattr__ = exports(
    __name__,
    {
        "Batch": "batch",
        "Forward": "forward",
        "LearningSpec": "spec",
        "ModelSpec": "spec",
        "NumpyModel": "numpy_model",
        "OnlineModel": "model",
        "Trainer": "trainer",
    },
)
