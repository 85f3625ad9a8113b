"""The learner's state: its counters, its checkpoint, and where a restart picks up.

A checkpoint holds every training variable (optimizer state included) and the learner's
counters (`streamlearn.online.figures.LearnerState`), in one file: a weights blob
(`codec`: the safetensors layout, nothing in it can run code) whose metadata holds the
counters as JSON. It is written to a
temporary file, synced and renamed over the previous one, so a crash at any moment leaves
the last complete checkpoint. Published weights hold the model's weights, step and
samples seen. A restarted learner resumes from its checkpoint, else its latest published
weights, each used only when it fits the model as configured now; otherwise the learner
starts fresh and says why in the log.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np

from streamlearn.config.app import BASE_VARIANT
from streamlearn.errors import WeightsError
from streamlearn.online import codec, tensors
from streamlearn.online.figures import LearnerState
from streamlearn.store.weights import WeightsStore

FORMAT = "streamlearn.checkpoint/1"
FILENAME = "checkpoint.safetensors"


@dataclass(frozen=True)
class Checkpoint:
    arrays: dict[str, np.ndarray]
    state: dict[str, Any]


class CheckpointDir:
    """The checkpoint of one model in `directory` (created when missing)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILENAME

    def save(self, arrays: dict[str, np.ndarray], state: dict[str, Any]) -> None:
        """Replace the checkpoint atomically (write, fsync, rename, fsync the directory)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        blob = codec.encode(arrays, {"format": FORMAT, "state": json.dumps(state)})
        tmp = self.directory / f".{FILENAME}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def load(self) -> Checkpoint | None:
        """The last checkpoint, None when there is none; WeightsError when it is unusable."""
        try:
            blob = self.path.read_bytes()
        except FileNotFoundError:
            return None
        arrays, meta = codec.decode(blob)
        if meta.get("format") != FORMAT:
            raise WeightsError(f"{self.path}: not a {FORMAT} file, got {meta.get('format')!r}")
        try:
            state = json.loads(meta["state"])
        except (KeyError, ValueError) as exc:
            raise WeightsError(f"{self.path}: unreadable state: {exc!r}") from None
        if not isinstance(state, dict):
            raise WeightsError(f"{self.path}: state must be a JSON object, got {state!r}")
        return Checkpoint(arrays, state)


log = logging.getLogger(__name__)


def from_checkpoint(
    checkpoints: CheckpointDir, model: keras.Model, variables: list[keras.Variable]
) -> LearnerState | None:
    """Restore `variables` (`tensors.training_variables(model)`) from the checkpoint and
    return its counters; None, touching nothing, when there is none or it does not fit."""
    try:
        found = checkpoints.load()
        if found is None:
            return None
        codec.check_fits(found.arrays, tensors.training_spec(model))
        state = LearnerState.from_json(found.state)
    except (WeightsError, TypeError, ValueError) as exc:
        log.warning("checkpoint %s unusable, not resuming from it: %s", checkpoints.path, exc)
        return None
    names = tensors.training_names(model)
    values, lr = dict(found.arrays), "optimizer/learning_rate"
    if lr in values:  # the configured learning rate wins over the saved one
        values[lr] = tensors.snapshot([variables[names.index(lr)]])[0]
    tensors.restore(variables, [values[k] for k in names])
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
        codec.check_fits(arrays, tensors.spec(model))
        step, seen = int(meta.get("step", 0)), int(meta.get("samples_seen", 0))
    except (WeightsError, ValueError) as exc:
        log.warning("latest weights v%d unusable, starting fresh: %s", version, exc)
        return None
    tensors.set_arrays(model, arrays)
    return version, step, seen
