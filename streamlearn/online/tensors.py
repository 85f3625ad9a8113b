"""A model's variables as named numpy arrays: read, written, checked and snapshotted.

What a publish, a checkpoint, a rollback and a resume move in and out of a Keras model,
on any backend (`keras` API only).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from streamlearn.errors import WeightsError


def split_per_replica(strategy: Any, array: np.ndarray) -> Any:
    """Replica r gets rows r, r+N, r+2N..., so real rows spread evenly over the padding."""
    n = strategy.num_replicas_in_sync
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: array[ctx.replica_id_in_sync_group :: n]
    )


def get_arrays(model: keras.Model) -> dict[str, np.ndarray]:
    """The model's weights by variable path (copies)."""
    return {v.path: np.array(keras.ops.convert_to_numpy(v)) for v in model.weights}


def spec(model: keras.Model) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Expected name -> (shape, dtype) of every weight, to validate a blob against."""
    return {v.path: (tuple(v.shape), np.dtype(v.dtype)) for v in model.weights}


def set_arrays(model: keras.Model, arrays: dict[str, np.ndarray]) -> None:
    """Load named arrays (already validated with `codec.check_fits`)."""
    try:
        for v in model.weights:
            v.assign(arrays[v.path])
    except KeyError as exc:
        raise WeightsError(f"missing weight {exc}") from None


def training_variables(model: keras.Model) -> list[keras.Variable]:
    """Weights plus optimizer state: what a rollback or checkpoint must restore."""
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    return list(model.weights) + list(model.optimizer.variables)


def training_names(model: keras.Model) -> list[str]:
    """Stable names of `training_variables`: weight paths, then `optimizer/NAME`.

    An optimizer's own paths carry a per-process counter (`adam_7/iteration`), so they
    would not match between two learners in one process.
    """
    n = len(model.weights)
    return [
        v.path if i < n else "optimizer/" + v.path.split("/", 1)[-1]
        for i, v in enumerate(training_variables(model))
    ]


def training_spec(model: keras.Model) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """`spec` of every training variable by `training_names`, for checkpoints."""
    variables, names = training_variables(model), training_names(model)
    found = {k: (tuple(v.shape), np.dtype(v.dtype)) for k, v in zip(names, variables, strict=True)}
    if len(found) != len(variables):
        raise WeightsError(f"training variables of the model have duplicate names: {names}")
    return found


def snapshot(variables: list[keras.Variable]) -> list[np.ndarray]:
    return [np.array(keras.ops.convert_to_numpy(v)) for v in variables]


def restore(variables: list[keras.Variable], values: list[np.ndarray]) -> None:
    for var, value in zip(variables, values, strict=True):
        var.assign(value)
