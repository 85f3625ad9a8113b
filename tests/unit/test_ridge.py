"""The regression's linear head is solved at the penalty with the least leave-one-out
error (`streamlearn.online.linear.ridge`): few samples of a noisy target are not chased."""

from __future__ import annotations

import numpy as np

from streamlearn.online.linear import RIDGE, ridge


def _penalty(inputs: int) -> np.ndarray:
    penalty = RIDGE["regression"] * np.eye(inputs + 1)
    penalty[-1, -1] = 1e-6  # the bias, as the head's solve sets it
    return penalty


def _rows(rng: np.random.Generator, n: int, inputs: int) -> np.ndarray:
    return np.hstack([rng.normal(0, 1, (n, inputs)), np.ones((n, 1))])


def test_a_noisy_target_seen_a_few_times_is_predicted_better_than_at_the_fixed_penalty():
    """10 standardised inputs, one worth a fifth of the target's spread (as diabetes'), 15
    samples, 20 draws: the fixed small penalty fits the noise (its error on new samples
    was about the target's spread); the chosen one shrinks toward the mean, and is
    almost never worse."""
    error: dict[str, list[float]] = {"chosen": [], "fixed": []}
    for seed in range(20):
        rng = np.random.default_rng(seed)
        weights = np.zeros((11, 1))
        weights[0] = 0.2
        a, fresh = _rows(rng, 15, 10), _rows(rng, 2000, 10)
        y = a @ weights + rng.normal(0, 1, (15, 1))
        fixed = np.linalg.solve(a.T @ a + _penalty(10), a.T @ y)
        for name, theta in (("chosen", ridge(a, y, _penalty(10))), ("fixed", fixed)):
            error[name].append(float(np.abs(fresh @ (theta - weights)).mean()))
    chosen, fixed = np.array(error["chosen"]), np.array(error["fixed"])
    assert chosen.mean() < 0.6 * fixed.mean(), (chosen.mean(), fixed.mean())
    assert (chosen <= fixed * 1.01).mean() >= 0.9, error


def test_a_clean_target_keeps_the_small_penalty():
    """Noise-free, the least penalty wins: a linear target is still learned exactly."""
    rng = np.random.default_rng(0)
    a = _rows(rng, 50, 4)
    weights = np.array([[1.0], [-2.0], [0.5], [0.0], [3.0]])
    assert np.abs(ridge(a, a @ weights, _penalty(4)) - weights).max() < 0.02
