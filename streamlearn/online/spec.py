"""What a model is and how it learns, as plain values with defaults: `ModelSpec` (the
network: task, inputs, architecture, heads, optimizer) and `LearningSpec` (the learning
around each step: buckets, replay, standardisation, drift).

A notebook writes them (`OnlineModel(ModelSpec(task="binary", inputs=4))`); the service
reads them from `[models.NAME]` and its `learning` table (`ModelConfig.spec`,
`ModelConfig.learning_spec`), whose defaults are these. Every field is checked here, so a
wrong value fails where it is written, naming the field.

>>> spec = ModelSpec(task="multiclass", inputs=("colour", "size"), classes=3,
...                  categorical={"colour": ("red", "blue")})
>>> spec.sample_shape, spec.outputs, spec.categories
((2,), 3, (2, 0))
>>> ModelSpec(task="multiclass", inputs=2)
Traceback (most recent call last):
    ...
ValueError: classes: task 'multiclass' needs classes = N (at least 2)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TASKS = ("regression", "binary", "multiclass")
ARCHITECTURES = ("linear", "mlp", "lstm", "conv1d")
SEQUENCE_ARCHITECTURES = ("lstm", "conv1d")  # over a window of steps
OPTIMIZERS = ("adam", "sgd")
MEMORY = 500  # the memory head's slots by default
MAX_MEMORY = 10_000


def _one_of(name: str, value: object, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name}: one of {list(allowed)}, got {value!r}")


@dataclass(frozen=True)
class ModelSpec:
    """A built-in model: what it predicts from what, and its network.

    `inputs` is a count (positional rows) or the inputs' names (a dict a sample, a missing
    one imputed); `categorical` maps a named input to its values (one-hot encoded, an
    unseen one all zeros). `memory` is the nearest-neighbour head's slots (0: none), on
    `heads = "hedge"` models; `steps` the soft-steps head of a binary or regression model
    of at most 32 standardised inputs."""

    task: str = "regression"  # regression | binary | multiclass
    inputs: int | tuple[str, ...] = 1
    classes: int | None = None  # multiclass only
    categorical: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    window: int | None = None  # steps a sample (lstm, conv1d)
    architecture: str = "mlp"  # linear | mlp | lstm | conv1d
    hidden: tuple[int, ...] = (64, 64)
    heads: str = "hedge"  # hedge | last
    memory: int = MEMORY
    steps: bool = True
    standardize: bool = True
    optimizer: str = "adam"  # adam | sgd
    learning_rate: float = 0.01
    clip_norm: float | None = None
    name: str = "model"

    def __post_init__(self) -> None:
        if not isinstance(self.inputs, int):  # names: a list given is kept as a tuple
            object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        values = {str(k): tuple(v) for k, v in dict(self.categorical).items()}
        object.__setattr__(self, "categorical", values)
        self._check()

    def _check(self) -> None:
        _one_of("task", self.task, TASKS)
        _one_of("architecture", self.architecture, ARCHITECTURES)
        _one_of("heads", self.heads, ("hedge", "last"))
        _one_of("optimizer", self.optimizer, OPTIMIZERS)
        if self.n_inputs < 1 or (
            self.fields is not None and len(set(self.fields)) < len(self.fields)
        ):
            raise ValueError(f"inputs: a count >= 1 or distinct names, got {self.inputs!r}")
        if (self.task == "multiclass") != (self.classes is not None) or (self.classes or 2) < 2:
            what = (
                "needs classes = N (at least 2)" if self.task == "multiclass" else "has no classes"
            )
            raise ValueError(f"classes: task {self.task!r} {what}")
        if self.architecture in SEQUENCE_ARCHITECTURES and self.window is None:
            raise ValueError(f"window: architecture {self.architecture!r} needs window = W")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window: >= 1, got {self.window}")
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden: sizes >= 1, got {list(self.hidden)}")
        if not 0 <= self.memory <= MAX_MEMORY:
            raise ValueError(f"memory: 0 to {MAX_MEMORY} slots, got {self.memory}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate: > 0, got {self.learning_rate}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ValueError(f"clip_norm: > 0 or None, got {self.clip_norm}")
        unknown = sorted(set(self.categorical) - set(self.fields or ()))
        if unknown:
            raise ValueError(f"categorical: {unknown} are not among the named inputs")
        if any(not values for values in self.categorical.values()):
            raise ValueError("categorical: each input takes at least one value")

    @property
    def fields(self) -> tuple[str, ...] | None:
        """The inputs' names, or None (positional rows)."""
        return None if isinstance(self.inputs, int) else self.inputs

    @property
    def n_inputs(self) -> int:
        return self.inputs if isinstance(self.inputs, int) else len(self.inputs)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """One sample's shape: (inputs,), or (window, inputs)."""
        return (self.n_inputs,) if self.window is None else (self.window, self.n_inputs)

    @property
    def outputs(self) -> int:
        """The model's outputs: the classes, else 1."""
        return self.classes if self.classes is not None else 1

    @property
    def categories(self) -> tuple[int, ...] | None:
        """Per named input, how many values it one-hot encodes to (0: a number); None for
        positional inputs (nothing encoded)."""
        if self.fields is None:
            return None
        return tuple(len(self.categorical.get(name, ())) for name in self.fields)


@dataclass(frozen=True)
class LearningSpec:
    """How a model learns around each step, whatever its network.

    `buckets`: the padded batch sizes a step takes (each traced once: no retrace); a batch
    larger than the last is learned in parts. Replay: in spare time, up to `replay_ratio`
    samples replayed per fresh one from the newest `replay_buffer`, `replay_batch` a step.
    `standardize_horizon`: the inputs' statistics are exact over the first N samples, then
    forget with this horizon. `drift_detection`: a lasting rise of the online error starts
    the learning of the new concept afresh. `recent_window`: samples the recent figures
    (`window_loss`, `window_metric`) are a mean over."""

    buckets: tuple[int, ...] = (16, 64, 256)
    replay_buffer: int = 2_000
    replay_ratio: float = 16.0
    replay_batch: int = 16
    standardize_horizon: int = 10_000
    drift_detection: bool = True
    recent_window: int = 5_000

    def __post_init__(self) -> None:
        object.__setattr__(self, "buckets", tuple(sorted(int(b) for b in self.buckets)))
        if not self.buckets or self.buckets[0] < 1:
            raise ValueError(f"buckets: positive sizes, got {list(self.buckets)}")
        for name in ("replay_buffer", "replay_batch", "standardize_horizon", "recent_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: >= 1, got {getattr(self, name)}")
        if not self.replay_ratio >= 0:
            raise ValueError(f"replay_ratio: >= 0, got {self.replay_ratio}")


def to_dict(spec: ModelSpec) -> dict[str, Any]:
    """`spec` as JSON-ready values (a saved model's metadata: `OnlineModel.to_bytes`).

    >>> from_dict(to_dict(ModelSpec(task="binary", inputs=("a", "b")))) == \\
    ...     ModelSpec(task="binary", inputs=("a", "b"))
    True
    """
    doc = {name: getattr(spec, name) for name in spec.__dataclass_fields__}
    doc["categorical"] = {k: list(v) for k, v in spec.categorical.items()}
    for name in ("inputs", "hidden"):
        doc[name] = doc[name] if isinstance(doc[name], int) else list(doc[name])
    return doc


def from_dict(doc: Mapping[str, Any]) -> ModelSpec:
    """The spec `to_dict` wrote; a ValueError or TypeError names what is wrong."""
    known = set(ModelSpec.__dataclass_fields__)
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ValueError(f"not fields of a model spec: {unknown}")
    return ModelSpec(**doc)
