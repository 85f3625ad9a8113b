"""The linear head, solved: a hedge model's head 0 fitted over the replay buffer.

Head 0 reads the standardised inputs (`streamlearn.online.hedge`): a linear model, or a
logistic one for a binary task. Trained by the step's optimizer alone it learns at the
optimizer's pace, and Adam keeps jittering around the fit by its step size: the linear
head held linear4's error at 0.056 (River's ARF: 0.035) and hyperplane at 0.907 (River's
logistic regression: 0.912). A linear model has a better way to learn, so in the
learner's spare time the head's weights are solved over the replay buffer as soon as
fresh samples came (first, so that the next publish has it), and again once their replay
is done, which moved them (the most recent `replay_buffer` samples, none
from before a drift): ridge regression in closed form, on the standardised target, for a
regression; for a binary task ridge logistic regression by Newton's method, from the
weights the head has, each step shortened until it lowers the penalised log loss
(`logistic`). The bias is not penalised.

Newton's full step overshoots where the labels contradict the head's fit: after a label
swap (breast_cancer's labels swapped halfway, in-process) the objective rose with every
step (12.8 -> 59 -> 159 -> 791), the weights' norm reached 100-400, the head scored 0.39
on the very samples it was solved over, and every later solve started from there: the
head that should carry the model through a change was lost until the next drift. The
step is now halved until the objective falls (Armijo), and the solve stops once Newton's
decrement says it has converged.

The penalty (`RIDGE`) differs by task. A regression's is small: it only keeps the system
well posed, and on the first messages a larger one shrinks the fit toward zero (on the
quality bench, in-process, seeds 0-1: linear4's MAE 0.036 at 1.0, 0.034 at 0.1;
friedman_drift 1.774 -> 1.763; diabetes and friedman unchanged). A logistic one's keeps
the weights finite where the classes barely overlap: at 0.1, hyperplane fell from 0.920
to 0.911 (confident heads lose their Hedge weight on the noisy labels).

The solve writes the head's block of the heads' kernel and bias (`hedge.Heads`), which
are published, checkpointed and exported as the rest; it is skipped, leaving the head as
it was, when its outcome is not finite. A multiclass head stays with the optimizer (a
softmax head's Newton step solves a system of (inputs x classes) unknowns).

Tried and dropped (in-process quality bench, seeds 0-1): the solve weighting samples by
age as the replay draws them (half-life 0.25 to 0.5 of the buffer): sea_drift 0.872 ->
0.871, hyperplane 0.921 -> 0.920 / 0.919, the linear head being out of favour where the
concept moves; a logistic penalty of 4 or 16: breast_cancer 0.921 -> 0.920 / 0.924 but
hyperplane -> 0.919 / 0.914 and sea 0.877 -> 0.876 / 0.872; a multiclass head solved one
class against the rest (the logits its softmax reads): wine 0.792 -> 0.795, digits 0.936
-> 0.930.

Cost: the inputs' standardisation over the buffer (one forward pass of the model's first
layers) and a system of (inputs + 1) unknowns: ~2 ms for 2,000 samples of 10 inputs on
one core. It runs only in spare time, never while a backlog waits.
"""

from __future__ import annotations

import keras
import numpy as np

from streamlearn.online import hedge, standardize
from streamlearn.online.replay import FromReplay, Replay

# the penalty on the weights, in units of standardised inputs, by task
RIDGE = {"regression": 0.1, "binary": 1.0}
NEWTON_STEPS = 8  # at most, per solve (a binary head starts from its last weights)
CONVERGED = 1e-6  # Newton's decrement per sample below which a solve stops


class LinearHead(FromReplay):
    """Head 0 of one hedge model, and when it is next solved."""

    MIN_HELD = 2

    def __init__(self, model: keras.Model, task: str) -> None:
        self.heads: hedge.Heads = model.get_layer("heads")
        tap = self.heads.input[0]
        self.features = keras.Model(model.inputs[0], tap, name="linear_features")
        self.inputs = int(tap.shape[-1])
        self.outputs = self.heads.outputs
        self.binary = task == "binary"
        self.ridge = RIDGE[task]
        self.target = standardize.find(model, standardize.Unstandardize)
        self.solves = 0

    @classmethod
    def of(cls, model: keras.Model, task: str) -> LinearHead | None:
        """The model's solvable linear head; None for a model without one (no hedge heads,
        a multiclass task)."""
        if task == "multiclass" or hedge.find(model) is None:
            return None
        return cls(model, task)

    def update(self, replay: Replay) -> bool:
        """Fit the head over `replay`'s samples; False when there was nothing to do."""
        if not self.due(replay):
            return False
        self.setting(replay)
        x, y = replay.held()
        a = np.asarray(self.features(x, training=False), np.float64).reshape(len(x), -1)
        a = np.hstack([a, np.ones((len(a), 1))])
        penalty = self.ridge * np.eye(a.shape[1])
        penalty[-1, -1] = 1e-6  # the bias: all but free
        kernel = keras.ops.convert_to_numpy(self.heads.kernel)
        bias = keras.ops.convert_to_numpy(self.heads.bias)
        y = y.reshape(len(y), -1).astype(np.float64)
        if self.binary:
            theta = np.append(kernel[: self.inputs, 0], bias[0]).astype(np.float64)[:, None]
            theta = logistic(a, y, theta, penalty)
        else:
            if self.target is not None:  # the head predicts the standardised target
                y = self.target.standardized(y)
            theta = np.linalg.solve(a.T @ a + penalty, a.T @ y)
        if not np.all(np.isfinite(theta)):
            return True
        kernel, bias = kernel.copy(), bias.copy()
        kernel[: self.inputs, : self.outputs] = theta[:-1]
        bias[: self.outputs] = theta[-1]
        self.heads.kernel.assign(kernel)
        self.heads.bias.assign(bias)
        self.solves += 1
        return True


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
