"""`[models.NAME.learning]`: how a model learns around each step (the library's
`LearningSpec`, whose defaults are the table's). Until 0.2 these were keys of
`[learner]` (`streamlearn.config.moved`).
"""

from __future__ import annotations

from pydantic import Field

from streamlearn.config.policies import Frozen
from streamlearn.online.spec import LearningSpec

_LEARNING = LearningSpec()  # the library's defaults are the table's


class LearningConfig(Frozen):
    """How a model learns around each step (`[models.NAME.learning]`, defaults in a
    top-level `[learning]`): the library's `LearningSpec` and the step's clipping. They
    were keys of `[learner]`, where they are still read, with a warning, until 0.3."""

    replay_ratio: float = Field(
        _LEARNING.replay_ratio,
        ge=0,
        description="samples replayed from the replay buffer per fresh sample, at most, in "
        "the learner's spare time (no fresh batch waiting); 0: no replay",
    )
    replay_batch: int = Field(
        _LEARNING.replay_batch,
        ge=1,
        description="samples per replayed step (rounded up to a bucket size)",
    )
    replay_buffer: int = Field(
        _LEARNING.replay_buffer,
        ge=1,
        description="the most recent fresh samples kept to replay from",
    )
    standardize_horizon: int = Field(
        _LEARNING.standardize_horizon,
        ge=1,
        description="input statistics are exact over the first N samples, then forget "
        "exponentially with this horizon (models with standardize)",
    )
    drift_detection: bool = Field(
        _LEARNING.drift_detection,
        description="watch the served prediction's online error for a lasting rise; on "
        "one, forget the replay buffer's samples from before it",
    )

    clip_norm: float | None = Field(
        None, gt=0, description="clip gradients to this global norm (built-in architectures)"
    )
