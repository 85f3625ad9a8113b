"""The config keys that moved in 0.2, read from their old places until 0.3: the learning
keys of `[learner]` (now `[learning]`) and its flat keys now in groups (`publish_min_ms`
-> `publish.min_ms`). `upgraded` moves each, with a warning naming its new place. It
imports no config model, so that every table's validator can use it.
"""

from __future__ import annotations

import warnings
from typing import Any

from pydantic import BaseModel

from streamlearn.errors import ConfigError

# `LearningConfig`'s fields (tests/unit/test_config.py holds the two alike)
LEARNING_KEYS = (
    "replay_ratio",
    "replay_batch",
    "replay_buffer",
    "standardize_horizon",
    "drift_detection",
    "clip_norm",
)
# keys of `[learner]` until 0.2 -> where they are now, from the model's table (read there
# until 0.3, with a warning: `upgraded`)
MOVED = {
    **{key: ("learning", key) for key in LEARNING_KEYS},
    "publish_every_steps": ("learner", "publish", "every_steps"),
    "publish_every_ms": ("learner", "publish", "every_ms"),
    "publish_min_ms": ("learner", "publish", "min_ms"),
    "keep_versions": ("learner", "history", "newest"),
    "history_versions": ("learner", "history", "versions"),
    "history_every_s": ("learner", "history", "every_s"),
    "checkpoint_dir": ("learner", "checkpoint", "dir"),
    "checkpoint_every_s": ("learner", "checkpoint", "every_s"),
    "checkpoint_every_samples": ("learner", "checkpoint", "every_samples"),
}


def upgraded(table: dict[str, Any], where: str, groups_only: bool = False) -> dict[str, Any]:
    """`table` (a model's, the top level's, a variant's) with each key of its `learner`
    that moved (`MOVED`) in its new place, and a `FutureWarning` naming that place; a key
    set in both places is a ConfigError naming both. `groups_only`: the moves within
    `learner` alone (a `LearnerConfig` made from keywords).

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     upgraded({"learner": {"max_batch": 8, "replay_ratio": 4, "publish_min_ms": 5}}, "")
    {'learner': {'max_batch': 8, 'publish': {'min_ms': 5}}, 'learning': {'replay_ratio': 4}}
    >>> str(seen[0].message)
    'learner.replay_ratio: now learning.replay_ratio (read from learner until 0.3)'
    """
    learner = table.get("learner")
    if not isinstance(learner, dict) or not MOVED.keys() & learner.keys():
        return table
    out = {**table, "learner": {k: v for k, v in learner.items() if k not in MOVED}}
    for old, path in MOVED.items():
        if old not in learner:
            continue
        if groups_only and path[0] != "learner":
            out["learner"][old] = learner[old]  # left for the model's table to move
            continue
        *tables, key = path
        place = out
        for name in tables:
            inner = place.get(name)
            if isinstance(inner, BaseModel):  # (given as a config object: what was set)
                inner = inner.model_dump(exclude_unset=True)
            place[name] = dict(inner) if isinstance(inner, dict) else {}
            place = place[name]
        new = where + ".".join(path)
        if key in place and place[key] != learner[old]:
            raise ConfigError(
                f"{where}learner.{old}: now {new}, which is set too ({place[key]!r}); "
                f"remove learner.{old}, got {learner[old]!r}"
            )
        place[key] = learner[old]
        warnings.warn(
            f"{where}learner.{old}: now {new} (read from learner until 0.3)",
            FutureWarning,
            stacklevel=2,
        )
    return out
