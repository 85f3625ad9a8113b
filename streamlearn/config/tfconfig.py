"""The multi-host learner's cluster, as `TF_CONFIG` describes it (`streamlearn.learner.collective`).

Kept apart from TensorFlow, so that `streamlearn up` checks it before it starts anything.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from streamlearn.errors import ConfigError

_WHERE = "learner.distribute: 'multi_worker'"


@dataclass(frozen=True)
class Workers:
    """This process's place in the multi-worker cluster: `count` workers, this one
    `index`; worker 0 is the chief (it publishes, checkpoints and reports)."""

    count: int
    index: int

    @property
    def chief(self) -> bool:
        return self.index == 0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Workers:
        """From `TF_CONFIG`: `{"cluster": {"worker": [host:port, ...]}, "task": {"type":
        "worker", "index": i}}`; a `ConfigError` says what is missing.

        >>> Workers.from_env({"TF_CONFIG": '{"cluster": {"worker": ["a:1", "b:1"]}, '
        ...                   '"task": {"type": "worker", "index": 1}}'})
        Workers(count=2, index=1)
        """
        raw = (os.environ if environ is None else environ).get("TF_CONFIG")
        if not raw:
            raise ConfigError(f"{_WHERE} needs TF_CONFIG in the environment (see docs/scaling.md)")
        try:
            doc = json.loads(raw)
            workers = list(doc["cluster"]["worker"])
            task = doc["task"]
            index = int(task["index"])
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"{_WHERE}: TF_CONFIG is not a cluster and task: {exc!r}") from None
        if task.get("type") != "worker" or not 0 <= index < len(workers):
            raise ConfigError(
                f"{_WHERE}: TF_CONFIG's task must be a worker of {workers}, got {task}"
            )
        return cls(len(workers), index)

    def partitions(self, partitions: int) -> list[int]:
        """The stream partitions this worker reads: every `count`-th, from its index.

        >>> Workers(2, 1).partitions(4)
        [1, 3]
        """
        if partitions < self.count:
            raise ConfigError(
                f"ingest.partitions: {partitions}, but {self.count} learner workers each "
                f"need a partition of their own; set it to {self.count} or a multiple"
            )
        return list(range(self.index, partitions, self.count))
