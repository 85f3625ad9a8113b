"""The `streamlearn` command (`main`) and its tools: `init` (`scaffold`), `evaluate`, and
the versions an operator exports and pins (`versions`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.cli.main import main


__all__, __getattr__ = exports(
    __name__,
    {
        "main": "main",
    },
)
