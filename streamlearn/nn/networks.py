"""Keras models from config: the built-in network of its spec, a factory's model, the
distribution strategy.

The built-in network is `streamlearn.online.network`'s; moving a model's weights in and
out as named arrays is `streamlearn.online.tensors`'s.

Only the public `keras` API is used, so the same code runs on the TensorFlow, JAX or
PyTorch backend (data-parallel training through `tf.distribute` is TensorFlow's own).
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# On a GPU, JAX and TensorFlow each take most of the device's memory in the first process
# that touches it, so a second (an actor beside the learner) fails with out-of-memory.
# Allocate what is used instead; set these variables to override.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")

import keras  # noqa: E402

from streamlearn.config.app import ModelConfig  # noqa: E402
from streamlearn.config.policies import LearnerConfig  # noqa: E402
from streamlearn.config.tfconfig import Workers  # noqa: E402
from streamlearn.errors import ConfigError  # noqa: E402
from streamlearn.online import network, tensors  # noqa: E402

log = logging.getLogger(__name__)


def build_model(cfg: ModelConfig, strategy: Any = None) -> keras.Model:
    """A compiled model for `cfg`: the built-in network of its spec
    (`streamlearn.online.network`), or its factory's model.

    With a `tf.distribute` strategy, its variables (optimizer's included) are mirrored.
    """
    if strategy is None:
        return _build(cfg)
    with strategy.scope():
        model = _build(cfg)
        tensors.training_variables(model)
        return model


def _build(cfg: ModelConfig) -> keras.Model:
    if not cfg.factory:
        return network.build(cfg.spec, one_device=cfg.learner.distribute == "none")
    if cfg.learning.clip_norm is not None:
        raise ConfigError(
            f"models.{cfg.name}.learning.clip_norm: applies to built-in architectures; "
            f"set global_clipnorm on the optimizer {cfg.factory} returns, got "
            f"{cfg.learning.clip_norm}"
        )
    return _from_factory(cfg)


def distribution(cfg: LearnerConfig) -> Any:
    """The `tf.distribute` strategy the learner trains under, or None (one device):
    `MirroredStrategy` over this host's devices, or `MultiWorkerMirroredStrategy` over the
    workers `TF_CONFIG` names (`streamlearn.learner.collective`)."""
    if cfg.distribute == "none":
        return None
    if keras.backend.backend() != "tensorflow":
        raise ConfigError(
            f"learner.distribute: {cfg.distribute!r} needs the tensorflow backend, "
            f"got {keras.backend.backend()!r}"
        )
    import tensorflow as tf

    if cfg.distribute == "multi_worker":
        Workers.from_env()  # a ConfigError, not TensorFlow's, when TF_CONFIG is missing
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.MirroredStrategy(list(cfg.devices) or None)


def size_thread_pools(cpus: int) -> dict[str, int | str]:
    """The backend's thread pools sized to `cpus`, the CPUs the process may use
    (`streamlearn.config.cpus`), not the host's cores it counts by itself (a pod's CPU limit
    is a quota: tensorflow#17206). Called before the backend runs anything; later, the
    pools stay as they are. Returns what they are, for the worker's status.

    TensorFlow: `cpus` threads within an op, as many (at least 2, so that one blocking op
    does not hold the only one) to run ops side by side. PyTorch: `cpus` threads. JAX: as
    XLA sizes them.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        threading = tf.config.threading
        try:
            threading.set_intra_op_parallelism_threads(cpus)
            threading.set_inter_op_parallelism_threads(max(2, cpus))
        except RuntimeError as exc:  # it ran an op already: what it has, it keeps
            log.warning("TensorFlow's thread pools not sized to %d CPUs: %s", cpus, exc)
        return {
            "backend": backend,
            "intra_op_threads": threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": threading.get_inter_op_parallelism_threads(),
        }
    if backend == "torch":
        import torch

        torch.set_num_threads(cpus)
        return {"backend": backend, "intra_op_threads": torch.get_num_threads()}
    return {"backend": backend}


def _from_factory(cfg: ModelConfig) -> keras.Model:
    module_name, _, func_name = (cfg.factory or "").partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"models.{cfg.name}.factory: cannot load {cfg.factory!r}: {exc}"
        ) from None
    model = factory(cfg)
    if not isinstance(model, keras.Model) or model.optimizer is None:
        raise ConfigError(
            f"models.{cfg.name}.factory: {cfg.factory} must return a compiled keras.Model"
        )
    return model
