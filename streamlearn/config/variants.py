"""A model's variants: `[models.NAME.variants.VNAME]` tables, which override how the model
learns, never what its samples look like (those are the stream's, shared by every variant).

`ModelConfig.variant` merges a variant in (`streamlearn.config.app`); the TOML tables are
only checked here, not merged.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from streamlearn.config.moved import upgraded
from streamlearn.config.policies import Frozen
from streamlearn.errors import ConfigError

# What a variant may change: how it learns. What its samples look like is the stream's.
VARIANT_FIELDS = (
    "architecture",
    "hidden",
    "heads",
    "memory",
    "steps",
    "learning_rate",
    "optimizer",
    "standardize",
    "factory",
    "learner",
    "learning",
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

    architecture: str | None = Field(
        None, description="the model's `architecture` for this variant (checked once merged)"
    )
    hidden: tuple[int, ...] | None = Field(
        None, examples=[(128, 128)], description="the model's `hidden` sizes"
    )
    heads: Literal["hedge", "last"] | None = Field(None, description="the model's `heads`")
    memory: int | None = Field(None, ge=0, description="the model's `memory` (slots)")
    steps: bool | None = Field(None, description="the model's `steps` (a steps head)")
    learning_rate: float | None = Field(
        None, gt=0, examples=[0.003], description="the model's `learning_rate`"
    )
    optimizer: Literal["adam", "sgd"] | None = Field(None, description="the model's `optimizer`")
    standardize: bool | None = Field(None, description="the model's `standardize`")
    factory: str | None = Field(
        None,
        pattern=r"^[\w.]+:\w+$",
        description="the model's `factory`; a variant that sets `architecture` or `factory` "
        "is built from what it sets",
    )
    learner: dict[str, Any] | None = Field(
        None,
        description="fields of `[learner]` laid one by one over the model's learner table "
        "(the same names and bounds)",
    )
    learning: dict[str, Any] | None = Field(
        None,
        description="fields of `[learning]` laid one by one over the model's learning table "
        "(the same names and bounds)",
    )

    def overrides(self) -> dict[str, Any]:
        """The fields set, a key that moved out of `learner` in its new place."""
        found = {k: v for k in VARIANT_FIELDS if (v := getattr(self, k)) is not None}
        return upgraded(found, "variants.VNAME.")


def check_variant_tables(table: dict[str, Any], where: str) -> None:
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
        for section in ("learner", "learning"):
            if not isinstance(vtable.get(section, {}), dict):
                raise ConfigError(f"{at}.{section}: must be a table, got {vtable[section]!r}")
