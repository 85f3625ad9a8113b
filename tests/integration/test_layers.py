"""The learning algorithms as a library: `streamlearn.online` loads in a fresh
interpreter without Redis, MQTT or pydantic, so that a device or a notebook can use it
with numpy and Keras alone (issue 49; the import-linter contracts check the same
statically)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SERVICE_LIBRARIES = ("redis", "paho", "pydantic", "pydantic_settings")


def test_every_online_module_imports_without_the_service_libraries():
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import streamlearn.online as online\n"
        "names = [m.name for m in pkgutil.iter_modules(online.__path__, 'streamlearn.online.')]\n"
        "for name in names: importlib.import_module(name)\n"
        f"loaded = sorted(m for m in sys.modules if m.split('.')[0] in {SERVICE_LIBRARIES!r})\n"
        "print(json.dumps({'modules': names, 'loaded': loaded}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert "streamlearn.online.trainer" in found["modules"], found
    assert found["loaded"] == [], f"online/ pulled in service libraries: {found['loaded']}"


def test_the_actor_loads_neither_tensorflow_nor_keras_for_a_built_in_model():
    """Every module of the actor role, and an `Actor`'s models for a built-in config, in a
    fresh interpreter: no TensorFlow, no Keras (issue 61; the import-linter contract
    checks the same statically)."""
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import streamlearn.actor as actor\n"
        "names = [m.name for m in pkgutil.iter_modules(actor.__path__, 'streamlearn.actor.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "from streamlearn.actor import runtimes\n"
        "from streamlearn.config.app import ModelConfig\n"
        "cfg = ModelConfig(name='m', inputs=['a', 'b'], task='binary', categorical={'b': ['x']})\n"
        "runtime, why = runtimes.choose(cfg)\n"
        "model = runtimes.builder(runtime, (1, 4))(cfg)\n"
        "import numpy as np\n"
        "y = model(np.zeros((2, 2), np.float32)).round(6).tolist()\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('keras', 'tensorflow'))\n"
        "print(json.dumps({'modules': names, 'runtime': runtime, 'y': y, 'loaded': loaded}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert "streamlearn.actor.worker" in found["modules"], found
    assert found["runtime"] == "numpy" and found["y"] == [[0.5], [0.5]], found
    assert found["loaded"] == [], f"the actor pulled in: {found['loaded'][:5]}"


LEARN_ONE_AT_A_TIME = """
import json, sys
import numpy as np
from streamlearn.online import ModelSpec, OnlineModel
rng = np.random.default_rng(0)
x = rng.normal(size=(300, 3)).astype(np.float32)
y = (x[:, 0] - x[:, 1] > 0).astype(int)
# unseeded: Keras's set_random_seed imports TensorFlow, where installed, on any backend
model = OnlineModel(ModelSpec(task="binary", inputs=3, hidden=(16,)))
right = []
for row, label in zip(x, y):
    right.append(model.predict_one(row) == label)
    model.learn_one(row, label)
layers = [layer.name for layer in model.trainer.model.layers]
service = {"redis", "paho", "pydantic", "tensorflow"}
loaded = sorted({m.split(".")[0] for m in sys.modules} & service)
print(json.dumps({"late": float(np.mean(right[150:])), "layers": layers, "loaded": loaded}))
"""


def _backends() -> list:
    """TensorFlow (the service's), and JAX or PyTorch where installed (not by `.ci/run`:
    each is a large download; `pip install torch==2.13.0` on this workplace's machines)."""
    found = [pytest.param("tensorflow")]
    for name, module in (("jax", "jax"), ("torch", "torch")):
        present = importlib.util.find_spec(module) is not None
        found.append(pytest.param(name, marks=pytest.mark.skipif(not present, reason=f"no {name}")))
    return found


@pytest.mark.parametrize("backend", _backends())
def test_a_notebook_learns_the_built_in_model_a_sample_at_a_time_without_the_service(backend):
    """`OnlineModel(ModelSpec(...))` in a fresh interpreter: the built-in hedge model (its
    heads, their mixture, the memory head) learns a stream one sample at a time, and no
    Redis, MQTT or pydantic module is loaded; on another Keras backend, no TensorFlow
    either (issue 63)."""
    out = subprocess.run(
        [sys.executable, "-c", LEARN_ONE_AT_A_TIME],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "KERAS_BACKEND": backend},
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"heads", "hedge", "memory"} <= set(found["layers"]), found["layers"]
    assert found["late"] >= 0.85, found  # a linear boundary, learned within 150 samples
    expected = ["tensorflow"] if backend == "tensorflow" else []
    assert found["loaded"] == expected, f"the library pulled in: {found['loaded']}"


def test_the_docs_reference_is_written_without_keras_or_tensorflow():
    """`bash run.sh docs` installs the `docs` extra alone (no TensorFlow: ~2 GB less): the
    generated reference pages are written in a fresh interpreter where Keras and
    TensorFlow cannot be imported (issue 64)."""
    code = (
        "import json, runpy, sys\n"
        "sys.modules['keras'] = sys.modules['tensorflow'] = None\n"
        "pages = runpy.run_path('docs/gen_reference.py', run_name='gen_reference')['pages']()\n"
        "print(json.dumps(sorted(pages)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "reference/configuration.md" in json.loads(out.stdout.strip().splitlines()[-1])
