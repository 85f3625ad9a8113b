"""Configuration: `streamlearn.toml`'s models and their variants (`app`), each role's
policies (`policies`), named fields, sources and labels (`inputs`), the environment's
connection settings (`settings`), and
the multi-host learner's `TF_CONFIG` (`tfconfig`), and where the config comes from
(`defaults`, standard library only). Names load on first use. A bad value fails at start
with a message that names the field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.config.app import (
        BASE_VARIANT,
        SEQUENCE_ARCHITECTURES,
        STREAM_FIELDS,
        VARIANT_FIELDS,
        AppConfig,
        ModelConfig,
        VariantConfig,
        load_config,
        parse_config,
    )
    from streamlearn.config.defaults import DEFAULT_CONFIG, DEMO_TOML
    from streamlearn.config.inputs import LabelsConfig, SourceConfig
    from streamlearn.config.policies import (
        ActorConfig,
        Frozen,
        IngestConfig,
        LearnerConfig,
        PromotionConfig,
    )
    from streamlearn.config.settings import Settings, load_settings

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
    "LabelsConfig",
    "LearnerConfig",
    "ModelConfig",
    "PromotionConfig",
    "Settings",
    "SourceConfig",
    "VariantConfig",
    "load_config",
    "load_settings",
    "parse_config",
]

__getattr__ = exports(
    __name__,
    {
        "BASE_VARIANT": "app",
        "SEQUENCE_ARCHITECTURES": "app",
        "STREAM_FIELDS": "app",
        "VARIANT_FIELDS": "app",
        "AppConfig": "app",
        "ModelConfig": "app",
        "Settings": "settings",
        "VariantConfig": "app",
        "load_config": "app",
        "load_settings": "settings",
        "parse_config": "app",
        "LabelsConfig": "inputs",
        "SourceConfig": "inputs",
        "DEFAULT_CONFIG": "defaults",
        "DEMO_TOML": "defaults",
        "ActorConfig": "policies",
        "Frozen": "policies",
        "IngestConfig": "policies",
        "LearnerConfig": "policies",
        "PromotionConfig": "policies",
    },
)
