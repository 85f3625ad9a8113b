"""What the drift detector watches: a model growing surer of itself is no drift, a label
swap is one within a few samples.

A learner replaying its buffer grows surer of every answer, the wrong ones too: on a
stream with label noise, its log loss climbs while it is right as often as ever, and that
climb set off drifts that threw away a model that was mostly right (hyperplane_drift,
agrawal: docs/learning-log.md, "Drift"). The detector watches the served prediction's
squared error instead (`hedge.served_error`: a classifier's Brier score).
"""

import keras
import numpy as np

from streamlearn.online.drift import DriftDetector, row_losses
from streamlearn.online.hedge import served_error

SEEDS = range(10)
N = 2000
SWAP = 1500


def sharpening(seed: int, swap: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Served probabilities of class 1 and the labels, one sample a step: 8% of the labels
    are noise, and the model's confidence grows from one decade (0.9) to six (0.999999)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, N).astype(np.float32)
    decades = np.linspace(1, 6, N) * rng.uniform(0.5, 1.0, N)
    sure = 1 - 10**-decades
    p_true = np.where(rng.uniform(size=N) < 0.08, 1 - sure, sure)
    p = np.where(y == 1, p_true, 1 - p_true)
    if swap is not None:
        y[swap:] = 1 - y[swap:]
    return p.reshape(-1, 1).astype(np.float32), y.reshape(-1, 1)


def drifts(per_sample: np.ndarray) -> list[int]:
    """The samples at which a detector fed one sample a step fires."""
    detector = DriftDetector()
    return [i + 1 for i, v in enumerate(per_sample) if detector.add(1, float(v), i + 1)]


def test_a_model_growing_surer_is_no_drift_where_its_log_loss_was():
    watched, log_loss = [], []
    for seed in SEEDS:
        p, y = sharpening(seed)
        watched += drifts(keras.ops.convert_to_numpy(served_error(y, p)))
        log_loss += drifts(row_losses("binary", p, y))
    assert watched == [], f"false drifts at samples {watched}"
    assert log_loss, "the log loss of the same answers set off no drift: the case is not shown"


def test_a_label_swap_is_a_drift_within_twenty_samples():
    for seed in SEEDS:
        p, y = sharpening(seed, swap=SWAP)
        fired = drifts(keras.ops.convert_to_numpy(served_error(y, p)))
        assert len(fired) == 1 and SWAP < fired[0] <= SWAP + 20, (seed, fired)
