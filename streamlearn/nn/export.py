"""Take a model out of the service: a published version as a standalone Keras file.

The exported model computes what the actors serve for that version, input
standardisation included, and is made of built-in Keras layers only, so
`keras.saving.load_model` opens it wherever Keras is, without streamlearn: the
`Standardize` layer becomes a `keras.layers.Normalization` holding the same mean and
variance, followed, when some feature has been constant so far, by a `Rescaling` that
zeroes it as `Standardize` does; a regression's `Unstandardize` becomes an inverted
`Normalization`; a hedge model's heads become a `Dense` each, and their mixture a `Dense`
whose kernel is the mixture weights (`streamlearn.online.hedge.as_builtin`), and the memory
head a softmax `Dense` over its slots and a `Dense` reading their values
(`streamlearn.online.memory.as_builtin`), the steps head's steps a sigmoid `Dense` of fixed
weights (`streamlearn.online.steps.as_builtin`). (A model whose
graph Keras cannot rebuild, a factory's subclassed model, is saved as it is: its custom
layers need their code, and streamlearn for `Standardize`, where it is loaded; so does a
model of named inputs, whose `Encode` layer, imputing missing inputs and one-hot encoding
categorical ones, is streamlearn's (`streamlearn.online.encode`).) `--format savedmodel`
writes a TensorFlow SavedModel directory for TF Serving instead (`serve` endpoint);
`--format safetensors` the version's weights blob as published, with the model's spec in
its metadata, which the library opens as it is (`OnlineModel.load`: a served version in a
notebook).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import keras
import numpy as np

from streamlearn.config.app import BASE_VARIANT, ModelConfig
from streamlearn.errors import NoWeightsError, StreamlearnError, WeightsError
from streamlearn.nn import networks
from streamlearn.online import codec, hedge, memory, network, spec, standardize, steps, tensors
from streamlearn.online.memory import Memory
from streamlearn.online.numpy_model import NumpyModel

Format = Literal["keras", "savedmodel", "safetensors"]
# Layers whose standalone form is built from built-in layers as it is called.
BUILT_AS_CALLED = (hedge.Heads, hedge.HedgeMix, Memory, steps.Steps)


class Versions(Protocol):
    """Where published versions are read from (`streamlearn.store.weights.WeightsStore`):
    export takes any such source, so that model code needs no Redis."""

    def fetch(self, version: int | None = None) -> tuple[int, bytes] | None: ...

    def versions(self) -> list[int]: ...


@dataclass(frozen=True)
class Exported:
    """What `export` wrote."""

    path: Path
    version: int
    variant: str
    format: Format


def export(
    cfg: ModelConfig,
    store: Versions,
    output: str | Path,
    version: int | None = None,
    fmt: Format = "keras",
) -> Exported:
    """Write version `version` (default: the latest) of `cfg`'s model to `output`."""
    output = Path(output)
    suffix = {"keras": ".keras", "safetensors": ".safetensors"}.get(fmt)
    if suffix and output.suffix != suffix:
        raise StreamlearnError(f"--output of the {fmt} format must end in {suffix}, got {output}")
    found = store.fetch(version)
    if found is None:
        if version is None:
            raise NoWeightsError(f"no weights published yet for model {cfg.name!r}")
        raise WeightsError(
            f"model {cfg.name!r} has no version {version} in Redis; "
            f"versions kept: {sorted(store.versions()) or 'none'}"
        )
    version, blob = found
    arrays, meta = codec.decode(blob)
    variant = meta.get("variant", BASE_VARIANT)
    if fmt == "safetensors":
        output.write_bytes(with_spec(cfg.variant(variant), arrays, meta))
        return Exported(output, version, variant, fmt)
    model = loaded(cfg.variant(variant), arrays)
    served = standalone(model)
    if fmt == "keras":
        served.save(output)
    elif keras.backend.backend() != "tensorflow":
        raise StreamlearnError(
            f"--format savedmodel needs the tensorflow backend, got {keras.backend.backend()!r}"
        )
    else:
        served.export(str(output), format="tf_saved_model", verbose=False)
    return Exported(output, version, variant, fmt)


def with_spec(cfg: ModelConfig, arrays: dict[str, np.ndarray], meta: dict[str, str]) -> bytes:
    """A published blob with `cfg`'s spec in its metadata (what `OnlineModel.to_bytes`
    writes), checked as an actor checks it; a factory's model has no spec to give."""
    if cfg.factory:
        raise StreamlearnError(
            f"--format safetensors: built-in architectures only (the library builds them); "
            f"model {cfg.name!r} comes from factory {cfg.factory}"
        )
    codec.check_fits(arrays, NumpyModel(cfg.spec).spec)
    return codec.encode(arrays, {**meta, "spec": json.dumps(spec.to_dict(cfg.spec))})


def loaded(cfg: ModelConfig, arrays: dict[str, np.ndarray]) -> keras.Model:
    """The model of `cfg` holding `arrays`, checked as an actor checks them."""
    model = networks.build_model(cfg)
    codec.check_fits(arrays, tensors.spec(model))
    tensors.set_arrays(model, arrays)
    return model


def standalone(model: keras.Model) -> keras.Model:
    """An uncompiled copy of `model` (no optimizer state), its `Standardize` and
    `Unstandardize` layers replaced by built-in layers (`Normalization`, inverted for the
    target), a hedge model's heads and mixture by `Dense` layers holding their weights.

    A model whose graph cannot be rebuilt (a factory's subclass) is returned as it is.
    """
    layer = standardize.find(model)
    normalize = zero = None
    if layer is not None:
        mean, var = layer.moments()
        mean[layer.keep], var[layer.keep] = 0.0, 1.0  # categorical indexes pass through
        spread = var > standardize.EPSILON
        # Normalization divides by sqrt(variance): 1 for a constant feature, then zeroed.
        normalize = keras.layers.Normalization(
            mean=mean, variance=np.where(spread, var, 1.0), name=layer.name
        )
        if not spread.all():
            zero = keras.layers.Rescaling(spread.astype("float32"), name=f"{layer.name}_constant")

    target = standardize.find(model, standardize.Unstandardize)
    if target is not None:
        mean, var = target.moments()
        denormalize = keras.layers.Normalization(
            mean=mean, variance=np.maximum(var, standardize.EPSILON), invert=True, name=target.name
        )

    def clone(old: keras.layers.Layer) -> keras.layers.Layer:
        if isinstance(old, BUILT_AS_CALLED):
            return old  # made of built-in layers as it is called (`call`)
        if old is layer:
            return normalize
        if old is target:
            return denormalize
        return old.__class__.from_config(old.get_config())

    def call(new: keras.layers.Layer, *args: Any, **kwargs: Any) -> Any:
        if isinstance(new, Memory):
            return memory.as_builtin(new, *args)
        if isinstance(new, steps.Steps):
            return steps.as_builtin(new, *args)
        if isinstance(new, hedge.Heads | hedge.HedgeMix):
            return hedge.as_builtin(new, *args)
        out = new(*args, **kwargs)
        return zero(out) if new is normalize and zero is not None else out

    try:
        copy = keras.models.clone_model(model, clone_function=clone, call_function=call)
    except ValueError:  # only a functional model's graph can be rebuilt with a layer added
        return model
    mix = hedge.find(model)
    if mix is not None:  # compiled as a one-head model: no streamlearn class in the file
        base = model.loss.base
        copy.compile(loss=base, weighted_metrics=[network.metric_of_loss(base)])
    for old in model.layers:
        kept = old is not layer and old is not target
        if kept and old.weights and not isinstance(old, BUILT_AS_CALLED):
            copy.get_layer(old.name).set_weights(old.get_weights())
    return copy
