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
