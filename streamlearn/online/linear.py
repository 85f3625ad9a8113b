"""The linear heads, solved: a hedge model's head 0 and steps head fitted over the replay
buffer.

Head 0 reads the standardised inputs (`streamlearn.online.hedge`), the steps head fixed
soft steps of them (`streamlearn.online.steps`): each a linear model, or a logistic one
for a binary task. Trained by the step's optimizer alone it would learn at
the optimizer's pace and jitter around the fit by its step size; a linear model has a
better way to learn. So in the learner's spare time the head's weights are solved over
the replay buffer (the most recent `replay_buffer` samples, none from before a drift) as
soon as fresh samples came (first, so that the next publish has it), and again once
their replay is done:

- a regression: ridge regression in closed form, on the standardised target, at the
  penalty with the least leave-one-out error (`ridge`), so that a handful of samples of
  a noisy target are not chased while a clean one keeps the small penalty;
- a binary task: ridge logistic regression by Newton's method, from the weights the head
  has, each step halved until it lowers the penalised log loss and the solve stopped
  once Newton's decrement says it has converged (`logistic`), so that labels
  contradicting the fit (a swap) cannot make it diverge;
- a multiclass task of at most `MULTICLASS_INPUTS` inputs: the same, one class against
  the rest, each class's column of logits (the softmax reads them), its bias penalised
  as the weights are: a class not yet seen keeps a bias near zero rather than one far
  below, which would cost its first sample a huge log loss and hand the mixture's
  weight to the heads still at chance.

Otherwise the bias is not penalised; the penalty (`RIDGE`) differs by task. The steps
head's penalty on an input's steps is over the square root of that input's relevance
(`steps.relevance`, which says why).

The solve writes each head's block of the heads' kernel and bias (`hedge.Heads`), which
are published, checkpointed and exported as the rest; it is skipped, leaving the head as
it was, when its outcome is not finite. A multiclass head of more inputs stays with the
optimizer: its solve is a Newton solve per class (digits' 64 inputs and 10 classes:
16-80 ms), and there the memory head serves the start better. It runs only in spare
time, never while a backlog waits.

What was measured and tried (the penalties, Newton's overshoot, weighting by age, a
multiclass solve, the cost): docs/learning-log.md.
"""

from __future__ import annotations

import keras
import numpy as np

from streamlearn.online import hedge, standardize, steps
from streamlearn.online.forward import Features
from streamlearn.online.replay import FromReplay, Replay

# the penalty on the weights, in units of standardised inputs, by task
RIDGE = {"regression": 0.1, "binary": 1.0, "multiclass": 1.0}
MULTICLASS_INPUTS = 32  # a multiclass head of more inputs stays with the optimizer
PENALTIES = (1.0, 10.0, 100.0, 1000.0)  # a regression's penalty's candidates, times `RIDGE`
NEWTON_STEPS = 8  # at most, per solve (a binary head starts from its last weights)
CONVERGED = 1e-6  # Newton's decrement per sample below which a solve stops


class LinearHead(FromReplay):
    """Head 0 and the steps head of one hedge model, and when they are next solved."""

    MIN_HELD = 2

    def __init__(self, model: keras.Model, task: str) -> None:
        self.heads: hedge.Heads = model.get_layer("heads")
        taps, stepped = list(self.heads.input), steps.output(model)
        self.solved = [0] + [k for k, t in enumerate(taps) if t is stepped]  # head indices
        # what head 0 reads, from the model's inputs; the steps head reads the steps of it
        # (the layer called alone: through a sub-model, Keras's own work took ~1 ms more,
        # and compiled, its numbers were not the network's to the bit)
        self.features = Features(keras.Model(model.inputs[0], taps[0]))
        self.steps = model.get_layer(steps.NAME) if stepped is not None else None
        self.task = task
        self.ridge = RIDGE[task]
        self.target = standardize.find(model, standardize.Unstandardize)
        self.solves = 0

    @classmethod
    def of(cls, model: keras.Model, task: str) -> LinearHead | None:
        """The model's solvable linear head; None for a model without one (no hedge heads,
        a multiclass task of more than `MULTICLASS_INPUTS` inputs)."""
        if hedge.find(model) is None:
            return None
        inputs = int(model.get_layer("heads").input[0].shape[-1])
        if task == "multiclass" and inputs > MULTICLASS_INPUTS:
            return None
        return cls(model, task)

    def update(self, replay: Replay) -> bool:
        """Fit the heads over `replay`'s samples; False when there was nothing to do."""
        if not self.due(replay):
            return False
        self.setting(replay)
        x, y = replay.held()
        y = y.reshape(len(y), -1).astype(np.float64)
        if self.task == "regression" and self.target is not None:  # predicted standardised
            y = self.target.standardized(y)
        kernel = keras.ops.convert_to_numpy(self.heads.kernel).copy()
        bias = keras.ops.convert_to_numpy(self.heads.bias).copy()
        reads = self.reads(x)
        for k, read in zip(self.solved, reads, strict=True):
            a = np.hstack([read, np.ones((len(read), 1))])
            penalty = self.ridge * np.eye(a.shape[1])
            if k:  # the steps head: each input's steps over the root of its relevance
                relevance = steps.relevance(reads[0], y)  # (head 0 reads the inputs)
                penalty[:-1, :-1] /= np.repeat(np.sqrt(relevance), len(steps.THRESHOLDS))[:, None]
            if self.task != "multiclass":  # (a class's bias is penalised: see above)
                penalty[-1, -1] = 1e-6  # the bias: all but free
            lo, hi, left, right = self.heads.spans[k]
            if self.task == "regression":
                theta = ridge(a, y, penalty)
            else:  # logistic: a binary head's one column, a multiclass head's one per class
                last = np.vstack([kernel[lo:hi, left:right], bias[left:right]]).astype(np.float64)
                classes = np.arange(right - left)
                labels = y if self.task == "binary" else (y == classes).astype(np.float64)
                columns = [logistic(a, labels[:, [c]], last[:, [c]], penalty) for c in classes]
                theta = np.hstack(columns)
            if np.all(np.isfinite(theta)):
                kernel[lo:hi, left:right] = theta[:-1]
                bias[left:right] = theta[-1]
        self.heads.kernel.assign(kernel)
        self.heads.bias.assign(bias)
        self.solves += 1
        return True

    def reads(self, x: np.ndarray) -> list[np.ndarray]:
        """What each solved head reads of the rows `x` (float64, a row each): the network's
        own taps, to the bit."""
        inputs = self.features(x)
        reads = [inputs] if self.steps is None else [inputs, self.steps.call(inputs)]
        return [np.asarray(read, np.float64).reshape(len(x), -1) for read in reads]


def ridge(a: np.ndarray, y: np.ndarray, penalty: np.ndarray) -> np.ndarray:
    """Ridge regression of `y` on the rows of `a`, its penalty `penalty` times the one of
    `PENALTIES` with the least leave-one-out squared error over the rows (in closed form:
    each row's residual over `1 - h_ii`, h the hat matrix's diagonal). Few samples of a
    noisy target want a larger penalty than many of a clean one.

    >>> rng = np.random.default_rng(0)
    >>> a = np.hstack([rng.normal(size=(200, 3)), np.ones((200, 1))])
    >>> y = a @ np.array([[1.0], [-2.0], [0.5], [0.0]])  # noise-free: the least penalty
    >>> penalty = np.diag([0.1, 0.1, 0.1, 1e-6])
    >>> bool(np.abs(ridge(a, y, penalty) - [[1], [-2], [0.5], [0]]).max() < 0.01)
    True
    >>> noise = rng.normal(size=(12, 1))  # 12 samples of noise: the weights shrink to ~0
    >>> bool(np.abs(ridge(a[:12], noise, penalty)[:3]).max() < 0.1)
    True
    """
    gram, rhs = a.T @ a, np.hstack([a.T @ y, a.T])
    best, chosen = np.inf, None
    for scale in PENALTIES:
        solved = np.linalg.solve(gram + scale * penalty, rhs)  # theta, then M^-1 a_i each
        theta = solved[:, : y.shape[1]]
        hat = np.sum(a * solved[:, y.shape[1] :].T, axis=1)
        loo = float(np.mean(((y - a @ theta) / np.maximum(1.0 - hat, 1e-6)[:, None]) ** 2))
        if loo < best:
            best, chosen = loo, theta
    assert chosen is not None
    return chosen


def logistic(a: np.ndarray, y: np.ndarray, theta: np.ndarray, penalty: np.ndarray) -> np.ndarray:
    """Ridge logistic regression of `y` (0/1, a column) on the rows of `a`, by Newton's
    method from `theta` (a column), each step halved until the penalised log loss falls
    by a quarter of what the step promised (at most 20 halvings); from zero instead when
    that scores better than `theta` (a head fitted to another concept).

    >>> a = np.array([[-2.0, 1.0], [-1.0, 1.0], [1.0, 1.0], [2.0, 1.0]])
    >>> y = np.array([[0.0], [1.0], [0.0], [1.0]])
    >>> far = np.array([[40.0], [0.0]])  # confident and wrong on two of four
    >>> logistic(a, y, far, np.diag([1.0, 1e-6])).round(3).ravel().tolist()
    [0.291, 0.0]
    """

    def objective(t: np.ndarray) -> float:
        z = a @ t
        return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * (t.T @ penalty @ t).item())

    best, zero = objective(theta), np.zeros_like(theta)
    if (at_zero := objective(zero)) < best:
        theta, best = zero, at_zero
    for _ in range(NEWTON_STEPS):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ theta, -30.0, 30.0)))
        grad = a.T @ (p - y) + penalty @ theta
        hess = a.T @ (a * (p * (1.0 - p))) + penalty
        step = np.linalg.solve(hess, grad)
        decrement = float((grad.T @ step).item())  # what a full step promises, times 2
        if not decrement > CONVERGED * len(a):
            break
        size = 1.0
        for _ in range(20):
            candidate = theta - size * step
            value = objective(candidate)
            if value <= best - 0.25 * size * decrement:
                break
            size /= 2
        else:
            break  # no step lowers it: as good as it gets from here
        theta, best = candidate, value
    return theta
