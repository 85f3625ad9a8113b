"""The learner's trainer, built from a model's config: the model (under its
`tf.distribute` strategy), the several-host step when configured, the library's specs
(`ModelConfig.spec`, `ModelConfig.learning_spec`), and the dead letter of an undone step."""

from __future__ import annotations

import json
from collections.abc import Callable

from streamlearn.config.app import ModelConfig
from streamlearn.learner.collective import Collective
from streamlearn.nn import networks
from streamlearn.online.batch import Batch
from streamlearn.online.trainer import Trainer

DeadLetter = Callable[[str, bytes], None]  # reason, payload


def build_trainer(cfg: ModelConfig, deadletter: DeadLetter) -> Trainer:
    """A trainer of a new model for `cfg`; `deadletter(reason, payload)` takes the
    samples of an undone step (their stream entries, and the first rows)."""
    strategy = networks.distribution(cfg.learner)
    replicas = strategy.num_replicas_in_sync if strategy else 1
    model = networks.build_model(cfg, strategy)
    several = cfg.learner.distribute == "multi_worker"
    collective = Collective(strategy, model, cfg) if several else None

    def undone(reason: str, batch: Batch) -> None:
        detail = {
            "entries": [e.decode() for e in batch.entries],
            "x": batch.x[: min(batch.n, 8)].tolist(),  # the dead letter keeps ~1 KiB anyway
            "y": batch.y[: min(batch.n, 8)].reshape(-1).tolist(),
        }
        deadletter(reason, json.dumps(detail).encode())

    return Trainer(
        model,
        cfg.spec,
        cfg.learning_spec(replicas),
        solved_heads=not cfg.factory,
        undone=undone,
        strategy=strategy,
        collective=collective,
    )
