"""Progressive validation's scores: each sample's answer, given before it was learned,
as a label or value, right or wrong (or its absolute error), and their rolling mean.

What `streamlearn evaluate` and the quality benchmark judge a learner by, in one place.
"""

from __future__ import annotations

import numpy as np


def decide(task: str, outputs: np.ndarray) -> np.ndarray:
    """The model's outputs (a row per sample) as labels (argmax, or > 0.5) or values."""
    outputs = np.asarray(outputs, np.float32)
    if task == "multiclass":
        return outputs.reshape(len(outputs), -1).argmax(axis=1).astype(np.float32)
    flat = outputs.reshape(len(outputs))
    return (flat > 0.5).astype(np.float32) if task == "binary" else flat


def score(task: str, y: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Right (1) or wrong (0) per sample, or the absolute error; NaN (no answer) is wrong,
    or 0.0 for a regression."""
    if task in ("binary", "multiclass"):
        return (predicted == y).astype(np.float32)
    return np.abs(np.nan_to_num(predicted, nan=0.0) - y)


def rolling(scores: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last `window` scores at each sample (fewer at the start).

    >>> rolling(np.array([1.0, 0.0, 1.0, 1.0]), 2).tolist()
    [1.0, 0.5, 0.5, 1.0]
    """
    total = np.concatenate([[0.0], np.cumsum(np.asarray(scores, np.float64))])
    end = np.arange(1, len(total))
    start = np.maximum(end - window, 0)
    return (total[end] - total[start]) / (end - start)
