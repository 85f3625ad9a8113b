"""Reload cost, in the benchmark's own process: staging a version (the background thread)
against the swap (the serving path), and the retraces of serving after warm-up.

Retraces are counted as runs of the models' Python forward code: a compiled pass runs
none, a trace or an eager call runs it once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import redis

from bench._stack import Stack
from streamlearn.actor.loop import Actor
from streamlearn.config import ModelConfig
from streamlearn.contract.names import Names
from streamlearn.online import codec, tensors
from streamlearn.store.weights import WeightsStore


def measure(stack: Stack, cfg: ModelConfig, reloads: int = 30) -> dict:
    """Staging (background thread) against the swap (serving thread), in this process."""
    names = Names("demo", "reload", "reload")
    store = WeightsStore(redis.Redis.from_url(stack.redis_url), names)
    actor = Actor(cfg, store, names, lambda *_: None)
    arrays = tensors.get_arrays(actor.model.model)  # type: ignore[attr-defined]
    stage, swap, assign = [], [], []
    for version in range(1, reloads + 1):
        shifted = {k: v + np.float32(version * 1e-3) for k, v in arrays.items()}
        store.publish(codec.encode(shifted))
        t = time.perf_counter()
        actor.reloader.poll(block=True)
        stage.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        actor.reload()
        swap.append((time.perf_counter() - t) * 1e6)
        t = time.perf_counter()
        spare = actor.reloader._spares["base"][0]
        spare.load(shifted)  # what a swap by assignment costs
        assign.append((time.perf_counter() - t) * 1000)
    runs = _count_forward_code(actor)
    for n in range(1, 2 * cfg.actor.max_batch + 3):
        actor.predict(np.zeros((n, *cfg.sample_shape), np.float32))
    return {
        "stage_ms_p50": float(np.median(stage)),
        "swap_us_p50": float(np.median(swap)),
        "swap_us_max": float(np.max(swap)),
        "assign_in_place_ms_p50": float(np.median(assign)),
        "retraces_after_warmup": runs[0],
        "batch_sizes_checked": 2 * cfg.actor.max_batch + 2,
        "version": actor.version,
    }


def _count_forward_code(actor: Actor) -> list[int]:
    """From now on, count the runs of the Python forward code of every model the actor may
    serve: a compiled pass runs none, a trace or an eager call runs it once."""
    runs = [0]
    for forward in [actor.model, *actor.reloader._spares["base"]]:
        model, call = forward.model, forward.model.call  # type: ignore[attr-defined]

        def counting(*a: object, _call: Callable = call, **k: object) -> object:
            runs[0] += 1
            return _call(*a, **k)

        object.__setattr__(model, "call", counting)  # past Keras' attribute tracking
    return runs
