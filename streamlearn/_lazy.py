"""Lazy re-exports for the subpackages' `__init__`: a name is imported from its module on
first use, so that importing a package (the client's, say) loads nothing heavy."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def exports(package: str, where: dict[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` for `package`: name -> the submodule that defines it."""

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{module}"), name)

    return __getattr__
