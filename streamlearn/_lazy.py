"""Lazy re-exports for the packages' `__init__`: a name is imported from its module on
first use, so that importing a package (the client's, say) loads nothing heavy.

The map each `__init__` gives is its one list of public names: `__all__` is made from it,
and `tests/unit/test_surface.py` checks the `TYPE_CHECKING` imports (for type checkers)
against it."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def exports(package: str, where: dict[str, str]) -> tuple[list[str], Callable[[str], object]]:
    """`__all__` and a module `__getattr__` for `package`: name -> the module (relative to
    `package`) that defines it.

    >>> names, get = exports("streamlearn.online", {"ModelSpec": "spec"})
    >>> names, get("ModelSpec").__name__
    (['ModelSpec'], 'ModelSpec')
    """

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{module}"), name)

    return sorted(where), __getattr__
