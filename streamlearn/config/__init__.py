"""Configuration: `streamlearn.toml`'s models and their variants (`app`), each role's
policies (`policies`), the environment's connection settings (`Settings`, in `app`), and
the multi-host learner's `TF_CONFIG` (`tfconfig`). A bad value fails at start with a
message that names the field.
"""

from __future__ import annotations

from streamlearn.config.app import (
    BASE_VARIANT,
    DEFAULT_CONFIG,
    DEMO_TOML,
    SEQUENCE_ARCHITECTURES,
    STREAM_FIELDS,
    VARIANT_FIELDS,
    AppConfig,
    ModelConfig,
    Settings,
    VariantConfig,
    load_config,
    load_settings,
    parse_config,
)
from streamlearn.config.policies import (
    ActorConfig,
    Frozen,
    IngestConfig,
    LearnerConfig,
    PromotionConfig,
)

__all__ = [
    "BASE_VARIANT",
    "DEFAULT_CONFIG",
    "DEMO_TOML",
    "SEQUENCE_ARCHITECTURES",
    "STREAM_FIELDS",
    "VARIANT_FIELDS",
    "ActorConfig",
    "AppConfig",
    "Frozen",
    "IngestConfig",
    "LearnerConfig",
    "ModelConfig",
    "PromotionConfig",
    "Settings",
    "VariantConfig",
    "load_config",
    "load_settings",
    "parse_config",
]
