"""The mixture's pace: a fresh model turns to the head that is right within its first tens
of samples; one resumed from a long run keeps the steady pace; a drift starts it again."""

import numpy as np

from streamlearn.online.hedge import Hedge, HedgeMix

# the heads' log losses a sample, as on agrawal's start: the steps head (3) right most often
LOSSES = np.array([0.69, 0.62, 0.60, 0.35, 0.69])


def _hedge() -> Hedge:
    layer = HedgeMix()
    layer.build((None, len(LOSSES), 1))
    return Hedge(layer, favoured=(0,))  # the linear head favoured, as the learner does


def _after(hedge: Hedge, samples: int) -> np.ndarray:
    for _ in range(samples):
        hedge.update(1, LOSSES)
    return hedge.served()


def test_a_fresh_mixture_serves_the_best_head_within_thirty_samples():
    assert _after(_hedge(), 30)[3] > 0.9


def test_a_resumed_mixture_keeps_the_steady_pace_until_a_drift():
    resumed = _hedge()
    resumed.read(seen=100_000)  # a learner resumed from a long run
    assert _after(resumed, 30)[3] < 0.5  # a head must stay better for longer to take over
    resumed.changed()  # a drift: every head alike, and the fast start again
    assert _after(resumed, 30)[3] > 0.9
