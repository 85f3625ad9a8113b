"""`streamlearn export`: a published version as a standalone model, loaded elsewhere.

The end-to-end test exports the version an actor answered with and loads the file in a
fresh Python process where streamlearn cannot be imported: the exported model must be
made of built-in Keras layers and predict what the actor replied.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest

from streamlearn.cli import main as cli
from streamlearn.config import ModelConfig
from streamlearn.contract.names import Names
from streamlearn.contract.records import Samples
from streamlearn.errors import NoWeightsError, StreamlearnError, WeightsError
from streamlearn.nn import export, networks
from streamlearn.online import OnlineModel, codec, hedge, standardize, tensors
from streamlearn.store.stream import SampleStream
from streamlearn.store.weights import WeightsStore
from tests.conftest import ROOT, eventually, settled

TOML = """
[models.e]
inputs = 3
task = "regression"
hidden = [16]

[models.e.learner]
max_batch = 32
buckets = [32]  # one padded size: one trace before ready (batch sizes are not this test's)
max_wait_ms = 5
publish.every_ms = 200
history.newest = 50
"""
# Raw features far from zero mean and unit scale: standardisation changes the prediction.
CENTRE, SPREAD = np.array([10.0, -5.0, 100.0]), np.array([2.0, 0.5, 20.0])

# Run in a fresh process that cannot import streamlearn: argv = keras file, SavedModel
# directory, x as JSON; prints both predictions as JSON.
LOAD = textwrap.dedent(
    """
    import json, sys
    sys.modules["streamlearn"] = None  # the exported files must not need it
    import keras, numpy as np, tensorflow as tf
    x = np.array(json.loads(sys.argv[3]), np.float32)
    from_keras = keras.saving.load_model(sys.argv[1]).predict(x, verbose=0)
    saved = tf.saved_model.load(sys.argv[2])  # held: its variables live as long as it
    from_saved = saved.serve(tf.constant(x)).numpy()
    print(json.dumps([from_keras.tolist(), from_saved.tolist()]))
    """
)


def raw_x(rng: np.random.Generator, n: int) -> np.ndarray:
    return (CENTRE + SPREAD * rng.standard_normal((n, 3))).astype(np.float32)


def test_an_exported_file_predicts_what_the_actor_replies_for_that_version(
    start_role, client_for, redis, settings, tmp_path: Path, monkeypatch
):
    names = Names("e", settings.topic_prefix, settings.key_prefix)
    start_role("learner", TOML)
    start_role("actor", TOML)
    rng = np.random.default_rng(11)
    x = raw_x(rng, 1500)
    y = (x - CENTRE) / SPREAD @ np.array([1.0, -2.0, 0.5], np.float32)
    queue = SampleStream(redis, names, (3,))
    queue.write([Samples(x[i : i + 50], y[i : i + 50]) for i in range(0, len(x), 50)])
    store = WeightsStore(redis, names)
    eventually(
        lambda: settled(settings, redis, names, len(x)),
        90,
        "the learner trained on every sample and published all it learned (no more versions)",
    )

    probe = raw_x(rng, 8)
    client = client_for("e")
    reply: dict = {}

    def learned_reply() -> bool:
        reply.update(client.request({"x": probe.tolist()}))
        return reply["version"] >= 3

    eventually(learned_reply, 10, "the actor serves a learned version")

    out_file, out_dir = tmp_path / "e.keras", tmp_path / "e_saved"
    config = tmp_path / "streamlearn.toml"
    for name, value in settings.as_env().items():
        monkeypatch.setenv(name, value)
    out_blob = tmp_path / "e.safetensors"
    for output, fmt in ((out_file, "keras"), (out_dir, "savedmodel"), (out_blob, "safetensors")):
        argv = ["export", "--version", str(reply["version"]), "--output", str(output)]
        assert cli.main([*argv, "--format", fmt, "--config", str(config)]) == 0
    # the library opens the weights as published, spec and all: a served version in a notebook
    notebook = OnlineModel.load(out_blob)
    assert notebook.spec == _cfg().spec
    served_y = np.array(reply["y"])
    np.testing.assert_allclose(notebook.predict_many(probe), served_y, rtol=1e-4, atol=1e-5)

    loaded = subprocess.run(
        [sys.executable, "-c", LOAD, str(out_file), str(out_dir), json.dumps(probe.tolist())],
        capture_output=True,
        text=True,
        cwd=ROOT.parent,
        timeout=120,
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    from_keras, from_saved = (np.array(p)[:, 0] for p in json.loads(loaded.stdout))
    served = np.array(reply["y"])
    assert np.allclose(from_keras, served, rtol=1e-4, atol=1e-5), (from_keras, served)
    assert np.allclose(from_saved, served, rtol=1e-4, atol=1e-5), (from_saved, served)
    # the statistics travelled with the file: the same weights without them predict otherwise
    arrays = codec.decode(store.fetch(reply["version"])[1])[0]
    raw = export.loaded(_cfg(), arrays)
    standardize.find(raw).mean.assign(np.zeros(3, np.float32))
    standardize.find(raw).var.assign(np.ones(3, np.float32))
    assert not np.allclose(raw.predict(probe, verbose=0)[:, 0], served, rtol=1e-2, atol=1e-2)


def _cfg(**fields) -> ModelConfig:
    return ModelConfig(**{"name": "e", "inputs": 3, "hidden": (16,), **fields})


# -- the conversion, in this process ---------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"task": "multiclass", "classes": 3},
        {"task": "binary"},  # a steps head too (`online.steps`)
        {"architecture": "lstm", "window": 4, "hidden": (8,)},
        {"architecture": "conv1d", "window": 4, "hidden": (8,)},
    ],
    ids=["mlp", "mlp_binary", "lstm", "conv1d"],
)
def test_the_standalone_model_has_only_built_in_layers_and_predicts_the_same(fields):
    """A feature constant so far (variance 0) is zeroed by Standardize: by a Rescaling too."""
    model = networks.build_model(_cfg(**fields))
    layer = standardize.find(model)
    layer.mean.assign(np.array([10.0, -5.0, 100.0], np.float32))
    layer.var.assign(np.array([4.0, 0.0, 400.0], np.float32))
    mix = hedge.find(model)  # the heads' mixture weights, not uniform: they are exported
    weights = np.arange(1.0, mix.heads + 1, dtype=np.float32)
    mix.alpha.assign(weights / weights.sum())
    out = export.standalone(model)
    kinds = {type(lay).__name__ for lay in out.layers}
    assert "Standardize" not in kinds and {"Normalization", "Rescaling"} <= kinds
    assert all(type(lay).__module__.startswith("keras.") for lay in out.layers)
    x = raw_x(np.random.default_rng(1), 4 * 5).reshape(-1, *_cfg(**fields).sample_shape)
    assert np.allclose(out.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)


def test_export_names_the_versions_kept_when_one_is_missing(redis, settings, tmp_path: Path):
    names = Names("e", settings.topic_prefix, settings.key_prefix)
    store = WeightsStore(redis, names, keep=2, history=0)
    cfg = _cfg(standardize=False)
    with pytest.raises(NoWeightsError, match="no weights published yet"):
        export.export(cfg, store, tmp_path / "e.keras")
    arrays = tensors.get_arrays(networks.build_model(cfg))
    for _ in range(3):
        store.publish(codec.encode(arrays))
    with pytest.raises(WeightsError, match=r"no version 1 .*versions kept: \[2, 3\]"):
        export.export(cfg, store, tmp_path / "e.keras", version=1)
    with pytest.raises(StreamlearnError, match="must end in .keras"):
        export.export(cfg, store, tmp_path / "e.h5")
    done = export.export(cfg, store, tmp_path / "e.keras")
    assert done.version == 3 and isinstance(keras.saving.load_model(done.path), keras.Model)
