"""The learning algorithms, as a library: what learns from samples, and nothing of where
they come from. It imports numpy and Keras (the public `keras` API: TensorFlow, JAX or
PyTorch underneath), never Redis, MQTT or the config's pydantic models.

- `trainer`: the facade, a model's test-then-train step with everything below
  (`Trainer`, its plain `Params`);
- the heads: `hedge` (the heads on every layer and their Hedge mixture), `linear` (head 0
  and the steps head solved over the replay buffer), `steps` (the steps head's inputs,
  soft steps of each input), `memory` (a nearest-neighbour head);
- the step: `stepsize`, `multistep` (replayed steps several to a compiled call),
  `replay` (the buffer), `drift` (the detector and what a change resets), `guard`
  (non-finite steps undone), `standardize` (inputs and target scaled as a layer);
- the plumbing they share: `batch` and `buckets` (padded steps), `forward` (the compiled
  prediction), `tensors` (a model's variables as named arrays), `figures` (counters).

What was measured on the way to each of them, and what was tried and dropped:
docs/learning-log.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.online.batch import Batch
    from streamlearn.online.forward import Forward
    from streamlearn.online.trainer import Params, Trainer

__all__ = ["Batch", "Forward", "Params", "Trainer"]

__getattr__ = exports(
    __name__,
    {"Batch": "batch", "Forward": "forward", "Params": "trainer", "Trainer": "trainer"},
)
