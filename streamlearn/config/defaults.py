"""Where the config comes from, with the standard library alone (the base install's
`publish` and `predict` read it too, `streamlearn.cli.light`): the path a command uses,
and the built-in demo model it falls back to."""

from __future__ import annotations

import os
from pathlib import Path

from streamlearn.config import environment

DEFAULT_CONFIG = "streamlearn.toml"
CONFIG_ENV = environment.CONFIG
NO_CONFIG = (
    f"streamlearn: no --config, {CONFIG_ENV} or ./{DEFAULT_CONFIG}: using the built-in demo model"
)

DEMO_TOML = """
[models.demo]
inputs = 9
task = "binary"
architecture = "mlp"
hidden = [64, 64]
learning_rate = 0.01
"""


def config_path(given: str | os.PathLike[str] | None) -> str | os.PathLike[str] | None:
    """`given`, else `$STREAMLEARN_CONFIG`, else `./streamlearn.toml` if it exists; None:
    the demo model."""
    if given:
        return given
    if env := os.environ.get(CONFIG_ENV):
        return env
    return DEFAULT_CONFIG if Path(DEFAULT_CONFIG).exists() else None
