"""The learning algorithms as a library: `streamlearn.online` loads in a fresh
interpreter without Redis, MQTT or pydantic, so that a device or a notebook can use it
with numpy and Keras alone (issue 49; the import-linter contracts check the same
statically)."""

from __future__ import annotations

import json
import subprocess
import sys

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
