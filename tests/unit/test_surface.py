"""The public surface: what `streamlearn` and each subpackage export. The lazy map in each
`__init__` (`streamlearn._lazy.exports`) is the one list of its public names: `__all__` is
made from it, and here the `TYPE_CHECKING` imports that type checkers read are checked
against it, name for name and module for module, and every name is resolved (as httpx's
`tests/test_exported_members.py` derives its check from the module). A change to the
surface is a CHANGELOG line."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import streamlearn

ROOT = Path(streamlearn.__file__).parent
PACKAGES = ["streamlearn"] + [
    f"streamlearn.{m.name}" for m in pkgutil.iter_modules([str(ROOT)]) if m.ispkg
]


def _typed_imports(package: str) -> dict[str, str]:
    """name -> module of the imports under the package's `if TYPE_CHECKING:`."""
    path = ROOT.parent.joinpath(*package.split("."), "__init__.py")
    found: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module, ast.unparse(imp)
                found |= {alias.name: imp.module for alias in imp.names}
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_exports_its_typed_names_and_every_name_resolves(package):
    module = importlib.import_module(package)
    assert module.__doc__, f"{package} says what it owns"
    typed = _typed_imports(package)
    if not hasattr(module, "__all__"):  # a package of modules only (`store.lua`'s scripts)
        assert typed == {}, f"{package} imports for type checkers what it does not export"
        return
    assert module.__all__ == sorted(typed), f"{package}: __all__ and its typed imports differ"
    for name in module.__all__:
        value = module.__getattr__(name)  # the lazy map's (`cli.main` is a module too)
        home = importlib.import_module(typed[name])
        assert getattr(home, name) is value, f"{package}.{name} is not {typed[name]}'s"


def test_the_library_and_the_client_export_their_front_doors():
    """What the guides import (docs/guides/library.md, docs/client.md)."""
    from streamlearn import online

    assert {"OnlineModel", "ModelSpec", "LearningSpec"} <= set(online.__all__)
    assert {"Client", "AsyncClient", "Prediction"} <= set(streamlearn.__all__)
