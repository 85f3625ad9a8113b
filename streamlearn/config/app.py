"""Configuration: `streamlearn.toml`, its models and their variants (the environment's
connections are `settings`).

Everything is validated once, at start, into frozen models; an invalid value fails with a
message that names the field and echoes the value.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, model_validator

from streamlearn.config.defaults import DEMO_TOML, NO_CONFIG, config_path
from streamlearn.config.inputs import (
    MAX_CATEGORIES,
    MAX_FIELDS,
    Category,
    FieldName,
    LabelsConfig,
    SourceConfig,
    check_fields,
)
from streamlearn.config.policies import (
    ActorConfig,
    Frozen,
    IngestConfig,
    LearnerConfig,
    PromotionConfig,
    describe_error,
)
from streamlearn.errors import ConfigError

_NAME_PATTERN = r"^[A-Za-z0-9_\-]{1,64}$"


# -- variants and promotion ---------------------------------------------------------------
# A model may declare variants that learn from its stream, each in its own learner; the
# actors serve the champion (`streamlearn.learner.variants`). Kept in one block: other changes to
# the model's fields should not need to touch it. A variant is merged in one place,
# `ModelConfig.variant`; the TOML tables are only checked here, not merged.

BASE_VARIANT = "base"  # the model's own config, as a variant
# What a variant may change: how it learns. What its samples look like is the stream's.
VARIANT_FIELDS = (
    "architecture",
    "hidden",
    "heads",
    "memory",
    "learning_rate",
    "optimizer",
    "standardize",
    "factory",
    "learner",
)
STREAM_FIELDS = (
    "inputs",
    "fields",
    "target",
    "strict_fields",
    "max_missing",
    "categorical",
    "sources",
    "labels",
    "task",
    "classes",
    "window",
)


class VariantConfig(Frozen):
    """`[models.NAME.variants.VNAME]`: fields that override the model's; unset ones inherit."""

    architecture: str | None = None  # checked as the model's field, once merged
    hidden: tuple[int, ...] | None = None
    heads: Literal["hedge", "last"] | None = None
    memory: int | None = Field(None, ge=0)
    learning_rate: float | None = Field(None, gt=0)
    optimizer: Literal["adam", "sgd"] | None = None
    standardize: bool | None = None
    factory: str | None = Field(None, pattern=r"^[\w.]+:\w+$")
    learner: dict[str, Any] | None = None  # laid field by field over the model's learner

    def overrides(self) -> dict[str, Any]:
        return {k: v for k in VARIANT_FIELDS if (v := getattr(self, k)) is not None}


def _check_variant_tables(table: dict[str, Any], where: str) -> None:
    """Check each `variants.VNAME` table names only what a variant may change."""
    variants = table.get("variants", {})
    if not isinstance(variants, dict):
        raise ConfigError(f"{where}.variants: must be a table of variants, got {variants!r}")
    for vname, vtable in variants.items():
        at = f"{where}.variants.{vname}"
        if not isinstance(vtable, dict):
            raise ConfigError(f"{at}: must be a table, got {vtable!r}")
        for key, value in vtable.items():
            if key in STREAM_FIELDS:
                raise ConfigError(
                    f"{at}.{key}: a variant learns from the model's stream, so {key} is the "
                    f"model's (set it in the model's table), got {value!r}"
                )
            if key not in VARIANT_FIELDS:
                raise ConfigError(
                    f"{at}.{key}: not something a variant can change; it may set "
                    f"{', '.join(VARIANT_FIELDS)}, got {value!r}"
                )
        if not isinstance(vtable.get("learner", {}), dict):
            raise ConfigError(f"{at}.learner: must be a table, got {vtable['learner']!r}")


Task = Literal["regression", "binary", "multiclass"]
Architecture = Literal["linear", "mlp", "lstm", "conv1d"]
# Architectures whose x is a window of `window` steps of `inputs` features.
SEQUENCE_ARCHITECTURES = ("lstm", "conv1d")
# The memory head's slots (`online.memory`): (inputs + outputs + 1) floats each in a version.
MEMORY = 500
MAX_MEMORY = 10_000


class ModelConfig(Frozen):
    """One model: its architecture and the policies of the roles that serve it."""

    name: str = Field(pattern=_NAME_PATTERN)
    inputs: int = Field(
        ge=1,
        le=MAX_FIELDS * 64,
        description="length of x (features per step with a window); in the TOML also a list "
        "of field names, kept in `fields`",
    )
    fields: tuple[FieldName, ...] | None = Field(
        None, description="the named inputs, in order (None: positional x)"
    )
    target: FieldName = Field("y", description="the label's field in a named sample")
    strict_fields: bool = Field(
        False, description="a named sample with fields the model does not use is a dead letter"
    )
    max_missing: float = Field(
        0.5, ge=0, le=1, description="a named sample missing more of its inputs is a dead letter"
    )
    categorical: dict[FieldName, tuple[Category, ...]] = Field(
        {}, description="string inputs and their values, one-hot encoded inside the model"
    )
    sources: tuple[SourceConfig, ...] = Field(
        (), description="the devices' own topics ingest subscribes to ([[models.NAME.sources]])"
    )
    labels: LabelsConfig = LabelsConfig()
    task: Task = "regression"
    classes: int | None = Field(None, ge=2, description="number of classes (multiclass)")
    architecture: Architecture = "mlp"
    hidden: tuple[int, ...] = (64, 64)
    heads: Literal["hedge", "last"] = Field(
        "hedge",
        description="hedge: an output head on the inputs and after every hidden layer, the "
        "prediction their mixture, weighted by each head's recent loss (Hedge); last: one "
        "head after the last hidden layer (built-in architectures)",
    )
    memory: int = Field(
        MEMORY,
        ge=0,
        le=MAX_MEMORY,
        description="hedge heads on one device: the recent samples a nearest-neighbour head "
        "predicts from (in the model's weights, written from the replay buffer); 0: none",
    )
    window: int | None = Field(None, ge=1, description="steps per sample (lstm, conv1d)")
    learning_rate: float = Field(0.01, gt=0)
    optimizer: Literal["adam", "sgd"] = "adam"
    standardize: bool = Field(
        True,
        description="the model's first layer standardises each input with its running mean "
        "and variance, learned from the stream (built-in architectures)",
    )
    factory: str | None = Field(
        None, pattern=r"^[\w.]+:\w+$", description="package.module:function returning a model"
    )
    ingest: IngestConfig = IngestConfig()
    learner: LearnerConfig = LearnerConfig()
    actor: ActorConfig = ActorConfig()
    variants: dict[str, VariantConfig] = Field(
        {}, description="other variants learning from the same stream (`base` is the model)"
    )
    promotion: PromotionConfig = PromotionConfig()
    _merged: dict[str, ModelConfig] = PrivateAttr(default_factory=dict)  # variants, merged once

    @model_validator(mode="before")
    @classmethod
    def _named_inputs(cls, data: Any) -> Any:
        """`inputs = ["a", "b"]`: the names go to `fields`, their count to `inputs`."""
        if isinstance(data, dict) and isinstance(data.get("inputs"), list | tuple):
            names = list(data["inputs"])
            if "fields" in data and data["fields"] is not None:
                raise ValueError("inputs: a list of names, so fields may not be given too")
            if not names:
                raise ValueError("inputs: at least one field name, got []")
            data = {**data, "inputs": len(names), "fields": names}
        return data

    @model_validator(mode="after")
    def _check_names(self) -> ModelConfig:
        fields = self.fields
        if fields is None:
            for name in ("categorical", "strict_fields", "target", "max_missing"):
                if getattr(self, name) != type(self).model_fields[name].default:
                    raise ValueError(f"{name}: only for named inputs (inputs = [names])")
            return self
        if len(fields) != self.inputs:
            raise ValueError(f"fields: {len(fields)} names for inputs = {self.inputs}")
        own = {"x", "id", "ids", "key", "seq", "reply_to", "samples"}
        clash = own & {*fields, self.target}
        if clash:
            raise ValueError(f"inputs: {sorted(clash)} name(s) the payload's own fields")
        for name, values in self.categorical.items():
            if not 1 <= len(values) <= MAX_CATEGORIES:
                raise ValueError(
                    f"categorical.{name}: 1 to {MAX_CATEGORIES} values, got {len(values)}"
                )
        check_fields(list(fields), self.target, self.categorical)
        return self

    @model_validator(mode="after")
    def _check_shape(self) -> ModelConfig:
        if self.task == "multiclass" and self.classes is None:
            raise ValueError("task 'multiclass' needs classes = N")
        if self.task != "multiclass" and self.classes is not None:
            raise ValueError(f"classes is only for task 'multiclass', got task {self.task!r}")
        if self.architecture in SEQUENCE_ARCHITECTURES and self.window is None:
            raise ValueError(f"architecture {self.architecture!r} needs window = W")
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden sizes must be >= 1, got {list(self.hidden)}")
        if "memory" in self.model_fields_set and self.memory and self.memory_slots == 0:
            raise ValueError(
                "memory: a memory head needs a learner on one device (its step compiled by "
                f"XLA), got learner.distribute = {self.learner.distribute!r}; set 0"
            )
        return self

    @property
    def memory_slots(self) -> int:
        """`memory`, or 0 on several devices (a mirrored step is not compiled by XLA)."""
        return self.memory if self.learner.distribute == "none" else 0

    @model_validator(mode="after")
    def _check_variants(self) -> ModelConfig:
        for name in self.variants:
            if name == BASE_VARIANT or not re.fullmatch(_NAME_PATTERN, name):
                raise ValueError(
                    f"variants: {name!r} is not a variant name ({_NAME_PATTERN}, "
                    f"and {BASE_VARIANT!r} is the model itself)"
                )
            try:
                self._merged[name] = self._merge(self.variants[name])
            except ValidationError as exc:
                raise ValueError(describe_error(exc, within=f"variants.{name}")) from None
        return self

    def variant(self, name: str) -> ModelConfig:
        """This model as variant `name` learns it: its overrides merged in (`base`: self),
        its learner table field by field over the model's learner.

        The result declares no variants of its own.

        >>> m = ModelConfig(name="m", inputs=2, learner={"max_batch": 8},
        ...                 variants={"big": {"hidden": [128], "learner": {"max_wait_ms": 1}}})
        >>> big = m.variant("big")
        >>> big.hidden, big.inputs, big.learner.max_batch, big.learner.max_wait_ms
        ((128,), 2, 8, 1.0)
        >>> m.variant("base") is m
        True
        """
        if name == BASE_VARIANT:
            return self
        try:
            return self._merged[name]
        except KeyError:
            raise ConfigError(
                f"model {self.name!r} has no variant {name!r}; known: {self.variant_names}"
            ) from None

    def _merge(self, variant: VariantConfig) -> ModelConfig:
        overrides = variant.overrides()
        if "factory" in overrides or "architecture" in overrides:
            overrides.setdefault("factory", None)  # the variant says what it is built from
        model = self.model_dump()
        if "learner" in overrides:
            overrides["learner"] = {**model["learner"], **overrides["learner"]}
        return ModelConfig.model_validate({**model, **overrides, "variants": {}})

    @property
    def variant_names(self) -> list[str]:
        """`base` first, then the declared variants."""
        return [BASE_VARIANT, *self.variants]

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one sample's x."""
        if self.window is not None:
            return (self.window, self.inputs)
        return (self.inputs,)

    @property
    def categories(self) -> list[int]:
        """Per input, how many values it one-hot encodes to (0: a number)."""
        return [len(self.categorical.get(name, ())) for name in self.fields or ()] or [
            0
        ] * self.inputs

    @property
    def outputs(self) -> int:
        return self.classes if self.task == "multiclass" else 1  # type: ignore[return-value]


class AppConfig(Frozen):
    """A whole `streamlearn.toml`."""

    models: dict[str, ModelConfig]

    def model(self, name: str | None) -> ModelConfig:
        """The named model, or the only one when no name is given."""
        if name is None:
            if len(self.models) != 1:
                raise ConfigError(
                    f"several models configured, pick one with --model: {list(self.models)}"
                )
            return next(iter(self.models.values()))
        try:
            return self.models[name]
        except KeyError:
            raise ConfigError(
                f"no model {name!r} in the config; known: {list(self.models)}"
            ) from None


_SECTIONS = ("ingest", "learner", "actor")


def parse_config(data: dict[str, Any], source: str = "config") -> AppConfig:
    """Validate a parsed TOML document.

    Top-level `[ingest]`, `[learner]` and `[actor]` tables are defaults that each
    `[models.NAME.*]` table overrides field by field.
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
        table = {"name": name, **table}
        for section in _SECTIONS:
            base = data.get(section, {})
            if base or section in table:
                table[section] = {**base, **table.get(section, {})}
        _check_variant_tables(table, f"{source}: models.{name}")
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
