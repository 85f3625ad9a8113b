"""Hedge: the learner moves a hedge model's mixture weights by each head's loss.

After every fresh step (scored before it learned), each head k's weight is multiplied by
`beta ** (n * loss_k)` for the step's n samples and mean loss `loss_k`, as Hedge does a
sample at a time; then every weight is raised to at least `smoothing / heads` (so a head
out of favour can come back after a change) and the weights renormalised (Sahoo et al.,
2018, smoothing 0.2). Their beta, 0.99, is this module's 0.9: a head better by 0.05 of
loss a sample then wins in ~50 samples rather than ~500, and with the solved linear head
(`linear`) the quality bench gained on every linear concept (hyperplane 0.907 -> 0.918)
and on mixed_drift and sine_drift (+0.01 each), losing no stream by more than 0.002 but
breast_cancer. Replayed steps do not count: their samples were learned.

A regression's losses (squared errors, in the target's units) are taken relative to the
heads' mean loss of the step (`relative`): in target units beta's pace depended on the
target's scale. Diabetes (a target of ~150, squared errors ~3,000) followed whichever
head won the last message; a noise-free linear target (squared errors ~1e-4 once
learned) never moved the weights, so the deep heads kept the share they had after the
first messages: linear4's MAE was 0.035 to 0.050 by seed, and is 0.035 to 0.037.

The model serves each head's weight above the floor (`served`), renormalised: the floor
keeps a head able to come back, but a head held there does not serve. With the memory
head (`streamlearn.nn.memory`) the floors of three heads out of favour made linear4's MAE
0.049 where the solved linear head alone reaches 0.033; served above the floor, 0.035.

The weights start from a prior (`prior`): a model whose head 0 is solved over the replay
buffer (`linear`) starts it at `FAVOURED` times another head's weight, the others alike.
That head is fitted to every sample so far from the first message on, while the hidden
layers' heads start from zero and learn at the optimizer's pace; a uniform start served them
a quarter each on the second message, when they had seen one step. In-process on the quality
bench, seeds 0-1, against a uniform start: sea 0.873 -> 0.875, sea_drift 0.869 -> 0.872,
linear4's MAE 0.034 -> 0.032, hyperplane +0.001; agrawal_drift -0.001, sine_drift -0.001,
breast_cancer -0.002 (2 of 569 samples). Tried at 3 with the memory head at 2 (sea_drift
+0.001 more, agrawal_drift -0.001 more) and at 5 (linear4 0.031, but sea_drift,
agrawal_drift and breast_cancer lower).

After a drift the weights are uniform (`changed`), not the prior: every head then starts
from zero on the same few samples of the new concept (the drift step the buffer kept), and
the hidden layers' heads read features learned over the whole stream, so the linear head has
no head start to reward. Back to the prior instead, breast_cancer_swap served the linear
head's fit to one message's worth of swapped labels. In-process, seeds 0-1, against the
prior: breast_cancer_swap 0.853 -> 0.864, friedman_drift's MAE 1.775 -> 1.763, agrawal_drift
0.904 -> 0.905, sine_drift 0.961 -> 0.962, stagger_drift 0.984 -> 0.985, mixed_drift
-0.0003; the streams with no drift unchanged. Chosen by replaying the heads' recorded
outputs through both rules first: the weights move only what is served, never what a head
learns.

Other rules were tried the same way (`python -m bench.hedge_rules --rule '{"beta": 0.98}'`:
the heads' outputs recorded in-process on all 23 streams of the quality bench, seeds 0-1,
40-sample messages, and replayed through each rule). The served mixture is within 0.003 of
its best single head on every stream but breast_cancer (0.921 against a hidden layer's
head's 0.929, whose log loss is worse), breast_cancer_swap (-0.005) and wine (-0.014) (and
diabetes, an MAE 0.11 above its linear head's), and no rule gained 0.002 on a stream
without losing as much on another: Brier's loss (sea_drift -0.004, sea -0.002;
agrawal_drift +0.002, wine +0.003), the 0-1 loss (digits -0.006, wine +0.003), log loss
mixed with it (half and half: sea_drift +0.002, the rest within 0.001; a fifth of log loss:
digits -0.003), beta 0.85 to 0.98 (at 0.98: agrawal and agrawal_drift -0.004, mixed_drift
-0.005, for diabetes' MAE 0.3 lower), smoothing 0.1, a favoured head at 5, and AdaHedge (de
Rooij et al., 2014; sea -0.003, digits -0.005). One sample a message (`--message-size 1`),
on the three small tables, beta 0.98 gained (breast_cancer 0.955 -> 0.961, wine 0.935 ->
0.947, diabetes 50.0 -> 49.0); it stays at 0.9, which the 40-sample messages of the bench
(and of a fleet's batches) favour.

The weights live in the model (`streamlearn.nn.hedge.HedgeMix`, `hedge/alpha`), so they are
published, checkpointed and undone with the rest. Writing them costs ~0.2 ms on the
TensorFlow backend, so they are written only when one has moved by 5% or more since the
last write; the exact values are kept here and the written ones lag by less than that.
"""

from __future__ import annotations

import keras
import numpy as np

from streamlearn.nn.hedge import HedgeMix

FAVOURED = 3.0  # a favoured head's starting weight, in units of another head's


class Hedge:
    """The mixture weights of one model's `HedgeMix` layer and their updates."""

    def __init__(
        self,
        layer: HedgeMix,
        beta: float = 0.9,
        smoothing: float = 0.2,
        tolerance: float = 0.05,
        relative: bool = False,
        favoured: int | None = None,
    ) -> None:
        """`layer`'s weights, set to the prior: every head alike, or head `favoured` at
        `FAVOURED` times another's. A fresh model's (a resumed one's are read afterwards)."""
        self.variable = layer.alpha
        self.relative = relative
        self.log_beta = float(np.log(beta))
        self.tolerance = tolerance
        self.floor = smoothing / layer.heads
        self.prior = np.ones(layer.heads)
        if favoured is not None:
            self.prior[favoured] = FAVOURED
        self.prior /= self.prior.sum()
        self.reset()

    def read(self) -> np.ndarray:
        """The weights as the model holds them (after a restore, an undo or a load)."""
        served = np.asarray(keras.ops.convert_to_numpy(self.variable), np.float64)
        # the inverse of `served`, to within the floor's renormalisation (a weight raised
        # to the floor sits a little below it once all are renormalised)
        self.alpha = self.written = self.floor + served * (1.0 - len(served) * self.floor)
        return self.alpha

    def update(self, n: int, losses: np.ndarray) -> None:
        """A fresh step over `n` samples had mean loss `losses[k]` for head k."""
        losses = np.asarray(losses, np.float64)
        if not np.all(np.isfinite(losses)):
            return
        if self.relative:  # in units of the heads' mean loss
            losses = losses / max(float(np.mean(losses)), 1e-12)
        log_alpha = np.log(self.alpha) + n * self.log_beta * losses
        alpha = np.exp(log_alpha - log_alpha.max())
        alpha = np.maximum(alpha / alpha.sum(), self.floor)
        self.alpha = alpha / alpha.sum()
        if np.max(np.abs(self.alpha - self.written) / self.written) >= self.tolerance:
            self._write()

    def reset(self) -> None:
        """The weights at the prior (a fresh model's)."""
        self.alpha = self.prior.copy()
        self._write()

    def changed(self) -> None:
        """After a drift: every head alike, as none is known to be better on the new
        concept yet."""
        self.alpha = np.full(len(self.prior), 1.0 / len(self.prior))
        self._write()

    def served(self) -> np.ndarray:
        """The weights the model serves: what each head holds above the floor. The floor
        keeps a head in the race (its weight can grow back); it does not make it serve."""
        above = np.maximum(self.alpha - self.floor, 0.0)
        return above / above.sum()

    def _write(self) -> None:
        self.variable.assign(self.served().astype(np.float32))
        self.written = self.alpha.copy()

    def figures(self) -> dict[str, list[float]]:
        return {"head_weights": [round(float(a), 4) for a in self.alpha]}
