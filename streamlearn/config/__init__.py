"""Configuration: `streamlearn.toml`'s models (`app`) and their variants (`variants`), each
role's policies (`policies`), named fields, sources and labels (`inputs`), every field with
its TOML path (`tables`), the environment's connection settings (`settings`), the
multi-host learner's `TF_CONFIG` (`tfconfig`); with the standard library only, where the
config comes from (`defaults`) and every environment variable read (`environment`). Names
load on first use. A bad value fails at start with a message that names the field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.config.app import (
        BASE_VARIANT,
        SEQUENCE_ARCHITECTURES,
        AppConfig,
        ModelConfig,
    )
    from streamlearn.config.assembly import AssemblyConfig
    from streamlearn.config.defaults import DEFAULT_CONFIG, DEMO_TOML
    from streamlearn.config.ingest import IngestConfig
    from streamlearn.config.inputs import LabelsConfig, SourceConfig
    from streamlearn.config.learning import LearningConfig
    from streamlearn.config.loading import load_config, parse_config
    from streamlearn.config.policies import ActorConfig, Frozen, LearnerConfig, PromotionConfig
    from streamlearn.config.settings import Settings, load_settings
    from streamlearn.config.variants import STREAM_FIELDS, VARIANT_FIELDS, VariantConfig


__all__, __getattr__ = exports(
    __name__,
    {
        "BASE_VARIANT": "app",
        "SEQUENCE_ARCHITECTURES": "app",
        "STREAM_FIELDS": "variants",
        "VARIANT_FIELDS": "variants",
        "AppConfig": "app",
        "ModelConfig": "app",
        "Settings": "settings",
        "VariantConfig": "variants",
        "load_config": "loading",
        "load_settings": "settings",
        "parse_config": "loading",
        "LabelsConfig": "inputs",
        "SourceConfig": "inputs",
        "AssemblyConfig": "assembly",
        "DEFAULT_CONFIG": "defaults",
        "DEMO_TOML": "defaults",
        "ActorConfig": "policies",
        "Frozen": "policies",
        "IngestConfig": "ingest",
        "LearnerConfig": "policies",
        "LearningConfig": "learning",
        "PromotionConfig": "policies",
    },
)
