"""The learner's trainer, built from a model's config: the model (under its
`tf.distribute` strategy), the several-host step when configured, and the plain
parameters the learning algorithms take (`streamlearn.online.trainer.Params`)."""

from __future__ import annotations

from streamlearn.config.app import ModelConfig
from streamlearn.learner.collective import Collective
from streamlearn.nn import networks
from streamlearn.online.trainer import DeadLetter, Params, Trainer


def params_of(cfg: ModelConfig, replicas: int = 1) -> Params:
    """`cfg`'s settings that the trainer reads, as plain values."""
    policy = cfg.learner
    return Params(
        task=cfg.task,
        sample_shape=cfg.sample_shape,
        buckets=policy.bucket_sizes(replicas),
        solved_heads=not cfg.factory,
        replay_buffer=policy.replay_buffer,
        replay_ratio=policy.replay_ratio,
        replay_batch=policy.replay_batch,
        drift_detection=policy.drift_detection,
        standardize_horizon=policy.standardize_horizon,
        recent_window=cfg.promotion.window_samples,
    )


def build_trainer(cfg: ModelConfig, deadletter: DeadLetter) -> Trainer:
    """A trainer of a new model for `cfg`; `deadletter(reason, payload)` takes the
    samples of an undone step."""
    strategy = networks.distribution(cfg.learner)
    replicas = strategy.num_replicas_in_sync if strategy else 1
    model = networks.build_model(cfg, strategy)
    several = cfg.learner.distribute == "multi_worker"
    collective = Collective(strategy, model, cfg) if several else None
    return Trainer(model, params_of(cfg, replicas), deadletter, strategy, collective)
