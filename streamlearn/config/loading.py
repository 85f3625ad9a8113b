"""Where a config comes from and how its tables combine: a TOML document validated
(`parse_config`: top-level tables as every model's defaults, keys of 0.1 moved), a file
found and read (`load_config`: `--config`, `$STREAMLEARN_CONFIG`, `./streamlearn.toml`,
else the built-in demo).
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from streamlearn.config.app import AppConfig
from streamlearn.config.defaults import DEMO_TOML, NO_CONFIG, config_path
from streamlearn.config.moved import upgraded
from streamlearn.config.policies import describe_error
from streamlearn.config.tables import overlaid
from streamlearn.config.variants import check_variant_tables
from streamlearn.errors import ConfigError

_SECTIONS = ("ingest", "learner", "learning", "actor")


def parse_config(data: dict[str, Any], source: str = "config") -> AppConfig:
    """Validate a parsed TOML document.

    Top-level `[ingest]`, `[learner]`, `[learning]` and `[actor]` tables are defaults
    that each `[models.NAME.*]` table overrides field by field (a key of `[learner]` that
    moved first moves to its new place: `upgraded`).
    """
    unknown = set(data) - {"models", *_SECTIONS}
    if unknown:
        raise ConfigError(f"{source}: unknown top-level table(s) {sorted(unknown)}")
    for section in _SECTIONS:
        if not isinstance(data.get(section, {}), dict):
            raise ConfigError(f"{source}: {section}: must be a table, got {data[section]!r}")
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise ConfigError(f"{source}: models: at least one [models.NAME] table is required")
    data = upgraded(data, "")
    merged: dict[str, Any] = {}
    for name, table in models.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: models.{name}: must be a table, got {table!r}")
        if "name" in table:
            raise ConfigError(
                f"{source}: models.{name}.name: not allowed, the table name "
                f"is the model name, got {table['name']!r}"
            )
        for section in _SECTIONS:
            if not isinstance(table.get(section, {}), dict):
                raise ConfigError(
                    f"{source}: models.{name}.{section}: must be a table, got {table[section]!r}"
                )
        table = upgraded({"name": name, **table}, f"models.{name}.")
        for section in _SECTIONS:
            base = data.get(section, {})
            if base or section in table:
                table[section] = overlaid(base, table.get(section, {}))
        check_variant_tables(table, f"{source}: models.{name}")
        merged[name] = table
    try:
        return AppConfig(models=merged)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {describe_error(exc)}") from None


def load_config(path: str | os.PathLike[str] | None = None) -> AppConfig:
    """Load `path`, else `$STREAMLEARN_CONFIG`, else `./streamlearn.toml`, else the
    built-in demo model (and say so on stderr): `defaults.config_path`."""
    path = config_path(path)
    if path is None:
        print(NO_CONFIG, file=sys.stderr)
        return parse_config(tomllib.loads(DEMO_TOML), "built-in demo config")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    return parse_config(data, str(path))
