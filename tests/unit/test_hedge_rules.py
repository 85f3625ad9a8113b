"""`bench.hedge_rules` replays the learner's own Hedge rule: the weights it serves per
message are those `mixing.Hedge` serves given the same heads' losses."""

import numpy as np
import pytest

from bench._quality_streams import Stream
from bench.hedge_rules import _hedge, losses
from streamlearn.online.hedge import Hedge, HedgeMix


@pytest.mark.parametrize("task", ["binary", "regression"])
def test_replayed_weights_are_the_learners(task):
    rng = np.random.default_rng(0)
    messages, rows, heads = 12, 40, 4
    y = (rng.random(messages * rows) > 0.5).astype(np.float32)
    if task == "regression":
        y = rng.normal(150, 50, messages * rows).astype(np.float32)
    outputs = [  # head 0 close to the labels, the others noisier, one a poor guess
        np.stack(
            [
                y[i * rows : (i + 1) * rows] * 0.8 + 0.1 + rng.normal(0, s, rows)
                for s in (0.05, 0.2, 0.3, 0.6)
            ],
            axis=1,
        )[:, :, None]
        for i in range(messages)
    ]
    if task == "binary":
        outputs = [np.clip(o, 0.01, 0.99) for o in outputs]
    layer = HedgeMix()
    layer.build((None, heads, 1))
    hedge = Hedge(layer, relative=task == "regression", favoured=(0,))
    stream = Stream(name="t", task=task, x=np.zeros((len(y), 1), np.float32), y=y)
    rec = {"heads": outputs, "prior": hedge.prior, "relative": hedge.relative, "resets": {5}}

    learner = []
    for i, out in enumerate(outputs):
        learner.append(hedge.served())
        hedge.update(rows, losses(task, out, y[i * rows : (i + 1) * rows], "log"))
        if i in rec["resets"]:
            hedge.changed()
    replayed = _hedge(stream, rec, {"loss": "log", "beta": 0.9, "smoothing": 0.2, "favoured": 3.0})

    np.testing.assert_allclose(replayed, learner, rtol=1e-9)
    assert learner[5][0] > 0.5  # the test means something: head 0 won before the reset
    np.testing.assert_allclose(learner[6], np.full(heads, 0.25))  # and uniform after it
