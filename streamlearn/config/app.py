"""Configuration: `streamlearn.toml`, its models and their variants (the environment's
connections are `settings`).

Everything is validated once, at start, into frozen models; an invalid value fails with a
message that names the field and echoes the value.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, model_validator

from streamlearn.config.assembly import AssemblyConfig
from streamlearn.config.ingest import IngestConfig
from streamlearn.config.inputs import (
    MAX_FIELDS,
    Category,
    FieldName,
    Gateways,
    LabelsConfig,
    SourceConfig,
    check_fields,
    check_named,
)
from streamlearn.config.learning import LearningConfig
from streamlearn.config.moved import upgraded
from streamlearn.config.policies import (
    ActorConfig,
    Frozen,
    LearnerConfig,
    PromotionConfig,
    describe_error,
)
from streamlearn.config.sparkplug import SparkplugConfig, check_sources
from streamlearn.config.state import StateConfig
from streamlearn.config.tables import overlaid
from streamlearn.config.variants import (
    VariantConfig,
)
from streamlearn.errors import ConfigError
from streamlearn.online.spec import (
    MAX_MEMORY,
    MEMORY,
    SEQUENCE_ARCHITECTURES,
    LearningSpec,
    ModelSpec,
)

_NAME_PATTERN = r"^[A-Za-z0-9_\-]{1,64}$"


# A model may declare variants that learn from its stream, each in its own learner; the
# actors serve the champion (`streamlearn.learner.variants`). A variant is merged in one
# place, `ModelConfig.variant`; its TOML table is checked in `streamlearn.config.variants`.
BASE_VARIANT = "base"  # the model's own config, as a variant


Task = Literal["regression", "binary", "multiclass"]
Architecture = Literal["linear", "mlp", "lstm", "conv1d"]
# Architectures whose x is a window of `window` steps of `inputs` features.
# The memory head's slots (`online.memory`): (inputs + outputs + 1) floats each in a version.


class ModelConfig(Frozen):
    """One model: its architecture and the policies of the roles that serve it."""

    name: str = Field(
        pattern=_NAME_PATTERN,
        description="the table's name ([models.NAME]), in every topic and key of the model; "
        "not set in the table",
    )
    inputs: int = Field(
        ge=1,
        examples=[4],
        le=MAX_FIELDS * 64,
        description="length of x (features per step with a window); in the TOML also a list "
        "of field names, kept in `fields`",
    )
    fields: tuple[FieldName, ...] | None = Field(
        None, description="the named inputs, in order (unset: positional x)"
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
    gateways: Gateways = Field(
        {},
        description="a window model's gateways ([models.NAME.gateways]): client id = [keys] "
        "that client may name besides its own id, in steps on samples/{client} and key-only "
        'requests on predict/{client} ("*": any key); every other client names only its own',
    )
    labels: LabelsConfig = Field(
        LabelsConfig(), description="predictions kept for labels that come later"
    )
    assembly: AssemblyConfig | None = Field(
        None,
        description="samples assembled from a topic per input (named inputs only); unset: "
        "a sample arrives whole",
    )
    sparkplug: SparkplugConfig | None = Field(
        None,
        description='the Sparkplug B edge nodes of format = "sparkplug_b" sources; unset: '
        "the defaults",
    )
    task: Task = Field(
        "regression",
        description="what is predicted: a number (regression), a probability of 1 (binary) "
        "or one of `classes` (multiclass); it sets the loss and the online metric",
    )
    classes: int | None = Field(None, ge=2, description="number of classes (multiclass)")
    architecture: Architecture = Field(
        "mlp", description="the built-in network (lstm, conv1d: over a window of steps)"
    )
    hidden: tuple[int, ...] = Field((64, 64), description="units of each hidden layer")
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
    steps: bool = Field(
        True,
        description="hedge heads of a binary or regression model of at most 32 standardised "
        "inputs: one more head, solved over the replay buffer, on soft steps of each input "
        "(an interval of one input learned within tens of samples); false: the layout of "
        "releases before it, whose checkpoints and versions it can resume and serve",
    )
    window: int | None = Field(None, ge=1, description="steps per sample (lstm, conv1d)")
    seq_field: FieldName = Field(
        "seq",
        examples=["Time"],
        description="a window model's named step: the field its order is read from, a "
        "number or an ISO 8601 time read as unix seconds (Tasmota's `Time`, Zigbee2MQTT's "
        "`last_seen`); without it a step takes its arrival time",
    )
    learning_rate: float = Field(0.01, gt=0, description="the optimizer's step size")
    optimizer: Literal["adam", "sgd"] = Field("adam", description="the optimizer of each step")
    standardize: bool = Field(
        True,
        description="the model's first layer standardises each input with its running mean "
        "and variance, learned from the stream (built-in architectures)",
    )
    factory: str | None = Field(
        None, pattern=r"^[\w.]+:\w+$", description="package.module:function returning a model"
    )
    ingest: IngestConfig = Field(IngestConfig(), description="the ingest role's policy")
    learner: LearnerConfig = Field(LearnerConfig(), description="the learner role's policy")
    learning: LearningConfig = Field(
        LearningConfig(), description="how the model learns around each step (the library's)"
    )
    actor: ActorConfig = Field(ActorConfig(), description="the actor role's policy")
    variants: dict[str, VariantConfig] = Field(
        {}, description="other variants learning from the same stream (`base` is the model)"
    )
    promotion: PromotionConfig = Field(
        PromotionConfig(), description="when a variant replaces the champion"
    )
    state: StateConfig | None = Field(
        None,
        description="each device's prediction of its readings, retained on "
        "{prefix}/{model}/state/{key} ([models.NAME.state]); unset: none",
    )
    _merged: dict[str, ModelConfig] = PrivateAttr(default_factory=dict)  # variants, merged once

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        """`learner.replay_ratio`, `learner.publish_min_ms` and the other keys that moved:
        read there until 0.3, with a warning naming the new place (`upgraded`)."""
        if isinstance(data, dict):
            data = upgraded(data, f"models.{data.get('name', 'NAME')}.")
        return data

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
            check_named(self.target, self.seq_field, self.window, self.sources, None)
            for name in ("categorical", "strict_fields", "target", "max_missing", "seq_field"):
                if getattr(self, name) != type(self).model_fields[name].default:
                    raise ValueError(f"{name}: only for named inputs (inputs = [names])")
            return self
        if len(fields) != self.inputs:
            raise ValueError(f"fields: {len(fields)} names for inputs = {self.inputs}")
        check_fields(list(fields), self.target, self.categorical)
        check_named(self.target, self.seq_field, self.window, self.sources, list(fields))
        return self

    @model_validator(mode="after")
    def _check_shape(self) -> ModelConfig:
        if self.task == "multiclass" and self.classes is None:
            raise ValueError("task 'multiclass' needs classes = N")
        if self.task != "multiclass" and self.classes is not None:
            raise ValueError(f"classes is only for task 'multiclass', got task {self.task!r}")
        if self.architecture in SEQUENCE_ARCHITECTURES and self.window is None:
            raise ValueError(f"architecture {self.architecture!r} needs window = W")
        if self.assembly is not None:  # named inputs, its limits named after them
            self.assembly.check(self.fields, self.target)
        check_sources(self.sources, self.assembly, self.fields)  # a Sparkplug one needs assembly
        if self.gateways and self.window is None:
            raise ValueError("gateways: only for a model with a window (keys name windows)")
        if self.factory and self.actor.runtime == "numpy":
            raise ValueError(
                "actor.runtime: 'numpy' serves built-in architectures only, and this model "
                f"comes from factory {self.factory}; set 'auto' or 'tensorflow', got 'numpy'"
            )
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
        for section in ("learner", "learning"):  # field by field over the model's
            if section in overrides:
                overrides[section] = overlaid(model[section], overrides[section])
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

    @property
    def inputs_status(self) -> dict[str, Any]:
        """What a client needs to send this model a sample or a request, as the learner's
        retained status carries it (contract §2.4, `inputs`), so that a client without
        this config can (`streamlearn.cli.light.from_status`)."""
        return {
            "inputs": list(self.fields) if self.fields is not None else self.inputs,
            "target": self.target,
            "categorical": {k: list(v) for k, v in self.categorical.items()},
            "window": self.window,
            "task": self.task,
            "classes": self.classes,
        }

    @property
    def spec(self) -> ModelSpec:
        """The network this table describes, as the library takes it (a factory's model:
        its task and inputs alone count)."""
        return ModelSpec(
            task=self.task,
            inputs=self.inputs if self.fields is None else self.fields,
            classes=self.classes,
            categorical=dict(self.categorical),
            window=self.window,
            architecture=self.architecture,
            hidden=self.hidden,
            heads=self.heads,
            memory=self.memory_slots,
            steps=self.steps,
            standardize=self.standardize,
            optimizer=self.optimizer,
            learning_rate=self.learning_rate,
            clip_norm=self.learning.clip_norm,
            name=self.name,
        )

    def learning_spec(self, replicas: int = 1) -> LearningSpec:
        """How this model learns around each step, as the library takes it; `replicas`: the
        devices a step is split over (each bucket a multiple of them)."""
        learning = self.learning
        return LearningSpec(
            buckets=self.learner.bucket_sizes(replicas),
            replay_buffer=learning.replay_buffer,
            replay_ratio=learning.replay_ratio,
            replay_batch=learning.replay_batch,
            standardize_horizon=learning.standardize_horizon,
            drift_detection=learning.drift_detection,
            recent_window=self.promotion.window_samples,
        )


class AppConfig(Frozen):
    """A whole `streamlearn.toml`."""

    models: dict[str, ModelConfig] = Field(
        description="one [models.NAME] table per model, at least one"
    )

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
