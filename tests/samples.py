"""Sample messages the end-to-end tests publish: a noise-free linear function of 3 inputs
with sample ids, and keyed observations of a per-device sine."""

from __future__ import annotations

import numpy as np

WEIGHTS = np.array([1.0, -2.0, 0.5])


def linear_messages(n: int, per: int = 40, seed: int = 0, first_id: int = 0) -> list[dict]:
    """`n` samples of y = x @ WEIGHTS, `per` to a message, ids s{first_id}, s{first_id+1}..."""
    x = np.random.default_rng(seed).uniform(-1, 1, (n, 3))
    y = x @ WEIGHTS
    ids = [f"s{first_id + i}" for i in range(n)]
    return [
        {"x": x[i : i + per].tolist(), "y": y[i : i + per].tolist(), "ids": ids[i : i + per]}
        for i in range(0, n, per)
    ]


def sine_observations(devices: list[str] | tuple[str, ...], steps: int, per: int = 30) -> list:
    """Messages of keyed observations: device k sees sin(t/4 + k) at seq t, with the previous
    step's value as its target. Each device's first two have no full window of 3."""
    observations = [
        {"key": d, "seq": t, "x": [float(np.sin(t / 4 + k))], "y": float(np.sin((t - 1) / 4 + k))}
        for t in range(steps)
        for k, d in enumerate(devices)
    ]
    return [{"samples": observations[i : i + per]} for i in range(0, len(observations), per)]
