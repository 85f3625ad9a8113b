"""Configuration: `streamlearn.toml` for models and policies, environment for connections.

Everything is validated once, at start, into frozen models; an invalid value fails with a
message that names the field and echoes the value.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamlearn.errors import ConfigError

DEFAULT_CONFIG = "streamlearn.toml"
_NAME_PATTERN = r"^[A-Za-z0-9_\-]{1,64}$"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IngestConfig(_Frozen):
    """How MQTT messages become stream entries."""

    replicas: int = Field(1, ge=1, description="ingest processes `streamlearn up` starts")
    max_payload_bytes: int = Field(1_048_576, ge=64, description="larger payloads are rejected")
    max_samples_per_message: int = Field(10_000, ge=1)
    deadletter_maxlen: int = Field(10_000, ge=1, description="dead-letter stream cap (entries)")
    deadletter_payload_bytes: int = Field(1024, ge=0, description="payload kept per dead letter")
    max_pending_messages: int = Field(
        1000, ge=1, description="messages received but not yet in Redis (MQTT receive maximum)"
    )
    dedup_window_s: int = Field(
        300,
        ge=0,
        description="a sample id seen again within this many seconds is dropped (0: off); "
        "Redis keeps a key of ~100 bytes per id for this long",
    )
    max_backlog_samples: int = Field(
        100_000,
        ge=1,
        description="above this many samples not yet acknowledged by the learner, ingest "
        "stops acknowledging (the broker holds the messages) until it drains",
    )
    window_ttl_s: int = Field(
        86_400,
        ge=1,
        description="a device's stored observations (keyed samples) expire after this many "
        "seconds without a new one",
    )
    max_dedup_ids: int = Field(
        1_000_000,
        ge=2,
        description="sample ids remembered for de-duplication, at most (~100 bytes of Redis "
        "each): beyond it the oldest are forgotten before dedup_window_s",
    )
    max_keys_per_message: int = Field(
        1000,
        ge=1,
        description="distinct device keys in one message; observations of further keys are "
        "rejected (dead-lettered with the message)",
    )
    max_devices: int = Field(
        10_000,
        ge=1,
        description="devices (keys) whose windows are kept; a new one evicts the window of "
        "the device idle the longest",
    )
    max_inbox_messages: int = Field(
        10_000,
        ge=1,
        description="messages received and not yet processed; beyond it (or max_inbox_bytes) "
        "QoS 0 messages are dropped and counted (QoS 1 ones are held at the broker)",
    )
    max_inbox_bytes: int = Field(
        64 * 1_048_576, ge=1, description="their payloads together, at most"
    )

    @model_validator(mode="after")
    def _check_keys(self) -> IngestConfig:
        if self.max_keys_per_message > self.max_devices:
            raise ValueError(
                f"max_keys_per_message must be <= max_devices ({self.max_devices}), "
                f"got {self.max_keys_per_message}"
            )
        return self


class LearnerConfig(_Frozen):
    """Micro-batching and publish policy of the learner."""

    max_batch: int = Field(256, ge=1, description="samples per train step, at most")
    max_wait_ms: float = Field(20, ge=0, description="wait for more samples once one arrived")
    buckets: tuple[int, ...] | None = Field(
        None, description="padded batch sizes; default: powers of 4 from 16 up to max_batch"
    )
    publish_every_steps: int = Field(50, ge=1)
    publish_every_ms: float = Field(250, gt=0)
    keep_versions: int = Field(5, ge=1, description="weights versions kept in Redis")
    status_every_ms: float = Field(1000, gt=0, le=2000)
    prefetch_batches: int = Field(
        2, ge=0, description="micro-batches read ahead by a background thread; 0: none"
    )
    checkpoint_dir: str | None = Field(
        None, description="checkpoints go to DIR/{model}/; unset: resume from published weights"
    )
    checkpoint_every_s: float = Field(10, gt=0, description="seconds between checkpoints")
    checkpoint_every_samples: int = Field(
        50_000,
        ge=1,
        description="or sooner, after this many samples: entries are acknowledged at each "
        "checkpoint, so keep it below ingest.max_backlog_samples",
    )
    clip_norm: float | None = Field(
        None, gt=0, description="clip gradients to this global norm (built-in architectures)"
    )
    tensorboard_dir: str | None = Field(
        None, description="write TensorBoard scalars to DIR/{model}/ at every status tick"
    )
    distribute: Literal["none", "mirrored"] = Field(
        "none", description="mirrored: data-parallel with tf.distribute.MirroredStrategy"
    )
    devices: tuple[str, ...] = Field(
        (), description="devices to mirror over, e.g. ['/gpu:0', '/gpu:1']; default: all GPUs"
    )
    retry_max_ms: float = Field(
        5000,
        gt=0,
        description="longest wait before retrying a Redis call that failed (a publish, "
        "status report, read or acknowledgement refused while Redis is full or down)",
    )
    stale_group_s: float = Field(
        3600,
        gt=0,
        description="a variant's group whose consumers have all been idle this long no "
        "longer holds back the trimming of the stream",
    )
    max_stream_length: int = Field(
        1_000_000,
        ge=1,
        description="nor does a variant's group with more unread entries than this",
    )

    @model_validator(mode="after")
    def _check_buckets(self) -> LearnerConfig:
        if self.devices and self.distribute != "mirrored":
            raise ValueError(f"devices need distribute = 'mirrored', got {list(self.devices)}")
        if self.buckets is not None:
            if not self.buckets or any(b < 1 for b in self.buckets):
                raise ValueError(f"buckets must be positive sizes, got {list(self.buckets)}")
            if max(self.buckets) < self.max_batch:
                raise ValueError(
                    f"the largest bucket must be >= max_batch ({self.max_batch}), "
                    f"got {list(self.buckets)}"
                )
        return self

    def bucket_sizes(self) -> tuple[int, ...]:
        """The sorted padded sizes every train step uses (so it never retraces)."""
        if self.buckets is not None:
            return tuple(sorted(set(self.buckets)))
        sizes, size = [], 16
        while size < self.max_batch:
            sizes.append(size)
            size *= 4
        return (*sizes, self.max_batch)


class ActorConfig(_Frozen):
    """Dynamic batching and reload policy of the actors."""

    replicas: int = Field(1, ge=1, description="actor processes `streamlearn up` starts")
    max_batch: int = Field(64, ge=1, description="rows per forward pass, at most")
    max_wait_ms: float = Field(2, ge=0, description="wait for more requests once one arrived")
    reload_check_ms: float = Field(1000, gt=0, description="fallback poll for a new version")
    status_every_ms: float = Field(
        2000, gt=0, description="retained per-actor status (version, weights age) refresh"
    )
    max_request_rows: int = Field(
        1024, ge=1, description="rows in one request, at most; more get an error reply"
    )
    max_reply_bytes: int = Field(
        1_048_576,
        ge=1024,
        description="a reply's JSON, at most (and below the broker's maximum packet size); "
        "a larger one is replaced by an error reply",
    )
    max_queued_requests: int = Field(
        1000, ge=1, description="requests received and not yet served; more are shed (counted)"
    )
    max_queued_bytes: int = Field(
        64 * 1_048_576, ge=1, description="their payloads together, at most; more are shed"
    )
    request_deadline_ms: float = Field(
        5000,
        gt=0,
        description="a request that waited longer (or past its MQTT v5 Message Expiry "
        "Interval) is not computed: it gets a 'deadline exceeded' error reply",
    )


# -- champion and challengers ---------------------------------------------------------------
# A model may declare variants that learn from its stream, each in its own learner; the
# actors serve the champion (`streamlearn.champion`). Kept in one block: other changes to
# the model's fields should not need to touch it.

BASE_VARIANT = "base"  # the model's own config, as a variant
# What a variant may change: how it learns. What its samples look like is the stream's.
VARIANT_FIELDS = ("architecture", "hidden", "learning_rate", "optimizer", "factory", "learner")
STREAM_FIELDS = ("inputs", "task", "classes", "window")


class VariantConfig(_Frozen):
    """`[models.NAME.variants.VNAME]`: fields that override the model's; unset ones inherit."""

    architecture: str | None = None  # checked as the model's field, once merged
    hidden: tuple[int, ...] | None = None
    learning_rate: float | None = Field(None, gt=0)
    optimizer: Literal["adam", "sgd"] | None = None
    factory: str | None = Field(None, pattern=r"^[\w.]+:\w+$")
    learner: LearnerConfig | None = None  # merged over the model's learner table at load

    def overrides(self) -> dict[str, Any]:
        return {k: v for k in VARIANT_FIELDS if (v := getattr(self, k)) is not None}


class PromotionConfig(_Frozen):
    """`[models.NAME.promotion]`: when a challenger replaces the champion.

    Each learner keeps the mean of its test-then-train loss and metric over its last
    `window_samples` samples; a challenger whose figure beats the champion's by `margin`
    (relative) while both windows hold `min_samples` takes over.
    """

    on: Literal["loss", "metric"] = Field(
        "metric", description="metric: accuracy (higher is better) or MAE; loss: lower is better"
    )
    margin: float = Field(0.05, ge=0, lt=1, description="relative, 0.05: 5% better")
    window_samples: int = Field(5000, ge=1, description="samples the figures are a mean over")
    min_samples: int = Field(1000, ge=1, description="samples both windows need to compare")
    cooldown_s: float = Field(60, ge=0, description="no promotion this soon after the last one")

    @model_validator(mode="after")
    def _check_window(self) -> PromotionConfig:
        if self.min_samples > self.window_samples:
            raise ValueError(
                f"min_samples must be <= window_samples ({self.window_samples}), "
                f"got {self.min_samples}"
            )
        return self


Task = Literal["regression", "binary", "multiclass"]
Architecture = Literal["linear", "mlp", "lstm", "conv1d"]
# Architectures whose x is a window of `window` steps of `inputs` features.
SEQUENCE_ARCHITECTURES = ("lstm", "conv1d")


class ModelConfig(_Frozen):
    """One model: its architecture and the policies of the roles that serve it."""

    name: str = Field(pattern=_NAME_PATTERN)
    inputs: int = Field(ge=1, description="length of x (features per step with a window)")
    task: Task = "regression"
    classes: int | None = Field(None, ge=2, description="number of classes (multiclass)")
    architecture: Architecture = "mlp"
    hidden: tuple[int, ...] = (64, 64)
    window: int | None = Field(None, ge=1, description="steps per sample (lstm, conv1d)")
    learning_rate: float = Field(0.01, gt=0)
    optimizer: Literal["adam", "sgd"] = "adam"
    factory: str | None = Field(
        None, pattern=r"^[\w.]+:\w+$", description="package.module:function returning a model"
    )
    ingest: IngestConfig = IngestConfig()
    learner: LearnerConfig = LearnerConfig()
    actor: ActorConfig = ActorConfig()
    variants: dict[str, VariantConfig] = Field(
        {}, description="challengers learning from the same stream (`base` is the model)"
    )
    promotion: PromotionConfig = PromotionConfig()

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
        return self

    @model_validator(mode="after")
    def _check_variants(self) -> ModelConfig:
        for name in self.variants:
            if name == BASE_VARIANT or not re.fullmatch(_NAME_PATTERN, name):
                raise ValueError(
                    f"variants: {name!r} is not a variant name ({_NAME_PATTERN}, "
                    f"and {BASE_VARIANT!r} is the model itself)"
                )
            try:
                self.variant(name)
            except ValidationError as exc:
                raise ValueError(f"variants.{name}: {_describe(exc)}") from None
        return self

    def variant(self, name: str) -> ModelConfig:
        """This model as variant `name` learns it: its overrides merged in (`base`: self).

        The result declares no variants of its own.

        >>> m = ModelConfig(name="m", inputs=2, variants={"big": {"hidden": [128]}})
        >>> m.variant("big").hidden, m.variant("big").inputs, m.variant("base") is m
        ((128,), 2, True)
        """
        if name == BASE_VARIANT:
            return self
        try:
            overrides = self.variants[name].overrides()
        except KeyError:
            raise ConfigError(
                f"model {self.name!r} has no variant {name!r}; known: {self.variant_names}"
            ) from None
        if "factory" in overrides or "architecture" in overrides:
            overrides.setdefault("factory", None)  # the variant says what it is built from
        return ModelConfig.model_validate({**self.model_dump(), **overrides, "variants": {}})

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
    def outputs(self) -> int:
        return self.classes if self.task == "multiclass" else 1


class AppConfig(_Frozen):
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


class Settings(BaseSettings):
    """Connections and naming, from `STREAMLEARN_*` environment variables.

    An unset URL means "not given": `streamlearn up` then starts its own server, and a role
    run alone uses the local default.
    """

    model_config = SettingsConfigDict(env_prefix="STREAMLEARN_", frozen=True, extra="ignore")

    mqtt_url: str | None = Field(None, description="mqtt://user:pass@host:1883 or mqtts://...")
    redis_url: str | None = Field(None, description="redis://user:pass@host:6379/0")
    mqtt_ca_file: str | None = Field(None, description="CA bundle for mqtts:// (TLS)")
    topic_prefix: str = Field("streamlearn", pattern=r"^[^#+$][^#+]*$")
    key_prefix: str = Field("sl", pattern=r"^[^{}\s]+$")
    share_group: str = Field("streamlearn", pattern=r"^[^/#+]+$")
    instance: str | None = Field(None, description="stable per-process id (client ids)")
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="serve Prometheus /metrics on this port (0: any free)"
    )

    def as_env(self) -> dict[str, str]:
        """The `STREAMLEARN_*` variables that give a child process these settings."""
        return {
            f"STREAMLEARN_{name.upper()}": str(value)
            for name, value in self.model_dump().items()
            if value is not None
        }

    @property
    def mqtt(self) -> str:
        return self.mqtt_url or "mqtt://localhost:1883"

    @property
    def redis(self) -> str:
        return self.redis_url or "redis://localhost:6379/0"


DEMO_TOML = """
[models.demo]
inputs = 9
task = "binary"
architecture = "mlp"
hidden = [64, 64]
learning_rate = 0.01
"""

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
        _merge_variants(table, f"{source}: models.{name}")
        merged[name] = table
    try:
        return AppConfig(models=merged)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(exc)}") from None


def load_config(path: str | os.PathLike[str] | None = None) -> AppConfig:
    """Load `path`, else `./streamlearn.toml`, else the built-in demo model."""
    if path is None:
        path = DEFAULT_CONFIG if Path(DEFAULT_CONFIG).exists() else None
    if path is None:
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


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigError(f"environment: {_describe(exc, prefix='STREAMLEARN_')}") from None


def _describe(exc: ValidationError, prefix: str = "") -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if p not in ("function-after",))
        loc = f"{prefix}{loc.upper()}" if prefix else loc
        msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        shown = "" if isinstance(value, dict) else f", got {value!r}"
        parts.append(f"{loc}: {msg}{shown}" if loc else f"{msg}{shown}")
    return "; ".join(parts)


def _merge_variants(table: dict[str, Any], where: str) -> None:
    """Check each `variants.VNAME` table names only what a variant may change, and lay its
    `learner` table over the model's (already merged with the top-level defaults)."""
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
        if "learner" in vtable:
            if not isinstance(vtable["learner"], dict):
                raise ConfigError(f"{at}.learner: must be a table, got {vtable['learner']!r}")
            learner = {**table.get("learner", {}), **vtable["learner"]}
            variants[vname] = {**vtable, "learner": learner}
