"""Where a restarted learner picks up: its checkpoint, else its latest published weights.

A checkpoint holds every training variable (optimizer state included) and the learner's
counters (`LearnerState`); published weights hold the model's weights, step and samples
seen. Either is used only when it fits the model as configured now; otherwise the learner
starts fresh and says why in the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import keras

from streamlearn import codec, models
from streamlearn.checkpoint import CheckpointDir
from streamlearn.config import BASE_VARIANT
from streamlearn.errors import WeightsError
from streamlearn.weights import WeightsStore

log = logging.getLogger(__name__)


@dataclass
class LearnerState:
    """Counters that a checkpoint saves and the status reports."""

    step: int = 0
    version: int = 0
    samples_seen: int = 0
    online_loss: float | None = None
    online_metric: float | None = None
    rollbacks: int = 0
    dead_lettered: int = 0  # samples of undone steps

    @classmethod
    def from_json(cls, doc: dict) -> LearnerState:
        """Counters saved in a checkpoint; ValueError or TypeError when one is not a number."""
        counts = ("step", "version", "samples_seen", "rollbacks", "dead_lettered")
        means = ("online_loss", "online_metric")
        return cls(
            **{k: int(doc.get(k, 0)) for k in counts},
            **{k: None if doc.get(k) is None else float(doc[k]) for k in means},
        )


def from_checkpoint(
    checkpoints: CheckpointDir, model: keras.Model, variables: list[keras.Variable]
) -> LearnerState | None:
    """Restore `variables` (`models.training_variables(model)`) from the checkpoint and
    return its counters; None, touching nothing, when there is none or it does not fit."""
    try:
        found = checkpoints.load()
        if found is None:
            return None
        codec.check_fits(found.arrays, models.training_spec(model))
        state = LearnerState.from_json(found.state)
    except (WeightsError, TypeError, ValueError) as exc:
        log.warning("checkpoint %s unusable, not resuming from it: %s", checkpoints.path, exc)
        return None
    names = models.training_names(model)
    values, lr = dict(found.arrays), "optimizer/learning_rate"
    if lr in values:  # the configured learning rate wins over the saved one
        values[lr] = models.snapshot([variables[names.index(lr)]])[0]
    models.restore(variables, [values[k] for k in names])
    return state


def from_published(
    store: WeightsStore, model: keras.Model, variant: str
) -> tuple[int, int, int] | None:
    """Set `model`'s weights to the latest version `variant` published and return that
    version, its step and samples seen; None, touching nothing, when there is none or it
    does not fit (another variant's, another shape)."""
    found = store.fetch(store.latest_version())
    if found is None:
        return None
    version, blob = found
    try:
        arrays, meta = codec.decode(blob)
        if meta.get("variant", BASE_VARIANT) != variant:
            raise WeightsError(f"they are variant {meta.get('variant')!r}'s")
        codec.check_fits(arrays, models.spec(model))
        step, seen = int(meta.get("step", 0)), int(meta.get("samples_seen", 0))
    except (WeightsError, ValueError) as exc:
        log.warning("latest weights v%d unusable, starting fresh: %s", version, exc)
        return None
    models.set_arrays(model, arrays)
    return version, step, seen
