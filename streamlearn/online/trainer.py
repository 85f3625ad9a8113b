"""The trainer: `train_on_batch` on padded batches, scored before it learns, guarded.

The one facade over the learning algorithms: the learner role feeds it batches drained
from the stream (`step`, `replay_step` in spare time); the library's `OnlineModel` a
message at a time (`learn`, `predict`). Both read `figures`.

- Shapes: batches are padded to a few bucket sizes (`batch`), each traced once at start
  (`warm_up`), so no step retraces afterwards; `guard.TrainProbe` counts traces to show it.
- Test-then-train: the loss and metric `train_on_batch` returns are computed on the batch
  with the weights from before its update; their running means are the online figures.
- Guard: a step whose loss, weights or optimizer state is non-finite is undone (restore the
  last good snapshot, replay the good batches since: `guard`) and its batch dead-lettered.
- Sample efficiency: the model's `Standardize` layer (and a regression's `Unstandardize`)
  takes each fresh batch's statistics once its step scored and learned it (`standardize`);
  fresh samples go to the replay buffer; in spare time `replay_step` sets the linear and
  memory heads from it (`linear`, `memory`), trains on batches from it (`replay`; several
  steps to a call where the backend allows: `multistep`), never scored, and solves the
  linear head again; a drift detector on the online error makes the learner start afresh
  on the new concept (`drift`, `changed`); the step size follows the recent loss
  (`stepsize`); a hedge model's mixture weights follow each head's loss (`hedge`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import keras
import numpy as np

from streamlearn.online import hedge, standardize, tensors
from streamlearn.online.batch import Batch, padded
from streamlearn.online.drift import DriftDetector, newer_part, row_losses
from streamlearn.online.figures import LearnerState, RecentFigures
from streamlearn.online.forward import Forward
from streamlearn.online.guard import FINITE, StepGuard, TrainProbe
from streamlearn.online.hedge import Hedge
from streamlearn.online.linear import LinearHead
from streamlearn.online.memory import MemoryWriter, computed_in_step
from streamlearn.online.multistep import STEPS, MultiStep
from streamlearn.online.replay import Replay
from streamlearn.online.spec import LearningSpec, ModelSpec
from streamlearn.online.stepsize import StepSize
from streamlearn.online.warmup import STACKED, WarmUp

log = logging.getLogger(__name__)

Undone = Callable[[str, Batch], None]  # a step undone: why, and its batch


class Trainer:
    """One model's training step, its guard and its counters (`state`): the facade that
    the learner role and `OnlineModel` both drive (`step`, `replay_step`;
    `learn`, `predict`, `figures`)."""

    def __init__(
        self,
        model: keras.Model,
        spec: ModelSpec,
        learning: LearningSpec | None = None,
        *,
        solved_heads: bool = True,
        undone: Undone | None = None,
        strategy: Any = None,
        collective: Any = None,
    ) -> None:
        """`model` compiled (under `strategy` when one is given) for `spec`'s task and
        inputs; `solved_heads`: a built-in model (`network.build`), whose linear and memory
        heads are set from the replay buffer. `undone(reason, batch)` hears of a step
        undone (its samples are not learned): the learner dead-letters them. `collective`
        is the several-host step (`learner.collective.Collective`), else `train_on_batch`
        runs, probed."""
        learning = learning or LearningSpec()
        self.model_spec = spec
        self.learning = learning
        self.task = spec.task
        self.sample_shape = spec.sample_shape
        self.solved_heads = solved_heads
        self.undone = undone
        self.strategy = strategy
        self.replicas = strategy.num_replicas_in_sync if strategy else 1
        self.model = model
        self.collective = collective
        self.probe = collective or TrainProbe(model, self.replicas)
        self.spec = tensors.spec(model)
        self.variables = tensors.training_variables(model)
        self.buckets = learning.buckets
        self.state = LearnerState()
        self.recent = RecentFigures(learning.recent_window)  # what promotion compares
        self.guard = StepGuard(self.variables, self.fit, self._rolled_back)
        # replayed steps `STEPS` to a call where the backend allows (`multistep`)
        self.multistep = MultiStep.of(model, self.replicas, collective)
        self.metric_name: str | None = None
        self.warmup = WarmUp(self)
        self.stats = standardize.statistics(model, learning.standardize_horizon)
        self.y_tail = () if spec.task == "multiclass" else (1,)
        self.replay = Replay(
            learning.replay_buffer,
            spec.sample_shape,
            self.y_tail,
            learning.replay_ratio,
            learning.replay_batch,
            self.buckets,
        )
        self.drift = DriftDetector() if learning.drift_detection else None
        self.replay_steps = 0
        self.step_size = StepSize(model.optimizer)
        self.linear = LinearHead.of(model, spec.task) if solved_heads else None
        self.memory = MemoryWriter.of(model, spec.task) if solved_heads else None
        mix = hedge.find(model)
        relative = spec.task == "regression"  # a squared error has the target's units
        favoured = (0,) if self.linear else ()  # the solved linear head starts ahead
        self.hedge = None if mix is None else Hedge(mix, relative=relative, favoured=favoured)
        self._resolve = False  # replayed steps moved the solved linear head since its solve
        self._forward: Forward | None = None  # the served prediction (`_newer_part`)
        # the heads set (and the linear one settled) by the replay, after each message's
        # samples; the learner sets them as it publishes instead, once a version: at 100
        # samples/s a solve per sample took most of a core (bench.serve's freshness run)
        self.heads_in_replay = True

    def warm_up(self, later: bool = False) -> None:
        """Trace the step once per bucket with zero sample weights, then undo its effects;
        with `later`, the smallest bucket only, the others in spare time (`warm_next`) or
        at their first step (`warmup`)."""
        logs = self.warmup.trace(later)
        if self.hedge is not None:
            self.hedge.read(seen=self.state.samples_seen)
        self._forward = Forward(self.model, self.sample_shape)  # for a drift's step
        self._forward(np.zeros((1, *self.sample_shape), np.float32))  # traced now
        for head in self._solved():  # what they are set from, at each publish
            head.features.compile(self.sample_shape)
        skip = ("loss", FINITE, hedge.HEAD_LOSSES)
        self.metric_name = next((k for k in logs if k not in skip), None)
        self.warmup.traces = self.probe.traces

    def warm_next(self) -> bool:
        """Trace one step `warm_up(later=True)` left (spare time); False when none is left."""
        return self.warmup.next()

    @property
    def cold(self) -> list[int | str]:
        """The steps not traced yet (`warm_up(later=True)`)."""
        return self.warmup.cold

    @property
    def traced_size(self) -> int:
        return self.warmup.traced_size

    @property
    def warm_traces(self) -> int:
        return self.warmup.traces

    @property
    def retraces(self) -> int:
        """Traces after warm-up: 0 unless a batch came in a shape not traced."""
        return self.warmup.retraces

    def step(self, batch: Batch) -> bool:
        """One step on `batch` of fresh samples, scored before it learns; a non-finite
        outcome undoes it and dead-letters the batch (False)."""
        n = batch.n
        logs = self.fit(batch.x, batch.y, batch.w)
        loss = float(logs["loss"])
        if not self.guard.finite(logs):
            what = "loss" if not math.isfinite(loss) else "weights or optimizer state"
            self._undo(batch, f"non-finite {what} at step {self.state.step + 1} (loss {loss})")
            return False
        # each head's loss, then the served prediction's error: what the drift detector
        # watches where the model mixes heads (`hedge.served_error`), else the loss
        heads = np.asarray(logs.get(hedge.HEAD_LOSSES, [loss]), np.float64)
        heads, watched = heads[:-1], float(heads[-1])
        if self.memory is not None:  # the trained heads' mean, the memory's stand-in not in it
            loss = float(np.mean(heads[:-1]))
        s = self.state
        s.step += 1
        s.samples_seen += n
        rate = 1.0 if s.online_loss is None else 1 - 0.995**n
        s.online_loss = _ema(s.online_loss, loss, rate)
        metric = None if self.metric_name is None else float(logs[self.metric_name])
        if metric is not None:
            s.online_metric = _ema(s.online_metric, metric, rate)
        self.recent.add(n, loss, metric)
        self.step_size.fresh(n, loss)  # the step size for what comes next
        if self.hedge is not None:
            if self.memory is not None and not computed_in_step(len(batch.x)):  # a backlog's
                # batch: the head's stand-in, counted as the worst: it gains no weight unearned
                heads[-1] = heads[:-1].max()  # nothing reads the step's logs after this
            self.hedge.update(n, heads)
        self.guard.kept(batch)
        for stats, target in self.stats:  # after the step: nothing learns from a sample before
            stats.update((batch.y if target else batch.x)[:n])
        self.replay.add(batch.x[:n], batch.y[:n])
        if self.drift is not None and self.drift.add(n, watched, s.samples_seen):
            keep = self._newer_part(batch)
            log.warning(
                "drift at sample %d: the online error rose; the replay buffer (but the newest "
                "%d samples), the optimizer state and the output heads start afresh",
                s.samples_seen,
                keep,
            )
            self.changed(keep=keep)
        return True

    def _newer_part(self, batch: Batch) -> int:
        """How many of the newest samples of the step that showed a drift are the new
        concept (`drift.newer_part`), judged by each one's loss under the served model.
        One forward pass of the step's samples, at a drift only, compiled at warm-up: called
        eagerly it held up the publish after a drift (docs/learning-log.md, "Drift")."""
        if self._forward is None:  # not warmed up
            self._forward = Forward(self.model, self.sample_shape)
        predicted = self._forward(batch.x[: batch.n])
        predicted = cast(np.ndarray, predicted)  # one output: the models it learns have one
        return newer_part(row_losses(self.task, predicted, batch.y[: batch.n]))

    def changed(self, keep: int = 0) -> None:
        """After a drift, what was learned of the old concept that would slow learning the
        new one goes: the replay buffer's samples but the newest `keep` (of the step that
        showed the change, those of the new concept: `_newer_part`); the optimizer's state
        (Adam's moments hold the old gradients) and the step size's recent loss; the output
        heads' weights, which start from zero (the hidden layers' features stay: what a new
        concept needs is most often a new readout of them, learned in tens of samples); and
        a hedge model's mixture weights, every head weighed alike again."""
        self.replay.keep_newest(keep)
        for v in self.model.optimizer.variables:
            if not v.path.endswith("learning_rate"):
                v.assign(keras.ops.zeros(v.shape, v.dtype))
        if self.hedge is not None:
            self.hedge.changed()
        self.step_size.changed()
        if self.solved_heads:  # the heads start from zero (a prediction of the mean)
            for v in self.model.trainable_variables:
                if v.path.startswith("head"):
                    v.assign(keras.ops.zeros(v.shape, v.dtype))

    def spare(self) -> bool:
        """Whether there is work for spare time (`replay_step`)."""
        return self.replay.due() or (
            self.heads_in_replay
            and (self._resolve or any(head.due(self.replay) for head in self._solved()))
        )

    def _solved(self) -> list[LinearHead | MemoryWriter]:
        """The heads set from the replay buffer in spare time rather than trained."""
        return [head for head in (self.linear, self.memory) if head is not None]

    def set_heads(self) -> bool:
        """The heads set from the buffer (`linear`, `memory`), if fresh samples came since
        they were last set; False when none was due. Spare time only (a few ms)."""
        fresh = [head for head in self._solved() if head.due(self.replay)]
        for head in fresh:
            head.update(self.replay)
        if self.linear in fresh:
            self._resolve = False  # solved after every replayed step so far: `settle` has none
        return bool(fresh)

    def replay_step(self) -> bool:
        """Spare-time work, one piece a call, the most valuable first: the heads set from
        the buffer (`set_heads`), so that the next publish has them; then a step on a
        batch from the buffer while the replay budget allows, not scored; then the linear
        head solved again, as the replayed steps moved it. False when there is none. A
        non-finite step is undone (its samples were learned fine once already). Without
        `heads_in_replay`, the steps only: the caller sets the heads as it publishes."""
        if self.heads_in_replay and self.set_heads():
            return True
        if not self.replay.due():
            return self.heads_in_replay and self.settle()
        steps = STEPS if self.multistep is not None and self.replay.due(STEPS) else 1
        batch = self.replay.sample(steps)
        rates = self.step_size.replayed(self.replay.batch, self.replay.size, steps)
        batch.rates = rates if steps > 1 else []  # one step: the optimizer's rate is set
        logs = self.fit(batch.x, batch.y, batch.w, batch.rates)
        if not self.guard.finite(logs):
            log.warning("undoing a non-finite replayed step (loss %s)", logs["loss"])
            self._undone()
            self.state.rollbacks += 1
            return False
        self.replay_steps += steps
        self._resolve = self.linear is not None
        self.guard.kept(batch)
        return True

    def settle(self) -> bool:
        """The linear head solved again if replayed steps moved it since its solve (at the
        end of the replay, and before a publish: no version holds a head the replay
        moved); False when it needs none."""
        if not self._resolve:
            return False
        self._resolve = False
        assert self.linear is not None  # `_resolve` is set only with a linear head
        self.linear.forget()
        return self.linear.update(self.replay)

    def flush_statistics(self) -> None:
        """The input (and target) statistics of every sample trained on, into the model."""
        for stats, _ in self.stats:
            stats.flush()

    def fit(
        self, x: np.ndarray, y: np.ndarray, w: np.ndarray, rates: Sequence[float] = ()
    ) -> dict[str, Any]:
        """One step; `STEPS` steps in one call, at `rates`, for batches stacked
        (`Replay.sample`)."""
        stacked = x.ndim == len(self.sample_shape) + 2
        first = STACKED if stacked else len(x)
        if self.warmup.first_of(first):  # its trace, not yet made: warm-up, not a retrace
            with self.warmup.tracing():
                return self.fit(x, y, w, rates)
        if stacked:
            assert self.multistep is not None  # stacked batches come only with one
            return self.multistep(x, y, w, rates)
        if self.collective:
            return self.collective.fit(x, y, w)
        if self.replicas > 1:
            x, y, w = (tensors.split_per_replica(self.strategy, a) for a in (x, y, w))
        return self.model.train_on_batch(x, y, sample_weight=w, return_dict=True)

    def predict(self, x: np.ndarray) -> np.ndarray | list[np.ndarray]:
        """The model's outputs for `x` with the weights as they are now, through the
        compiled forward pass the actors use (traced at warm-up)."""
        if self._forward is None:
            self._forward = Forward(self.model, self.sample_shape)
        return self._forward(x)

    def learn(self, x: np.ndarray, y: np.ndarray) -> None:
        """Learn one message's samples as the learner does: padded steps of at most the
        largest bucket, each scored before it learns, then the replay and the heads'
        solves as far as the replay budget allows (the learner's spare time)."""
        largest = self.buckets[-1]
        for lo in range(0, len(x), largest):
            part = (x[lo : lo + largest], y[lo : lo + largest])
            self.step(padded([part[0]], [part[1]], self.buckets, self.y_tail))
        while self.replay_step():
            pass

    def figures(self) -> dict[str, object]:
        """The counters, for the status."""
        s = self.state
        return {
            "step": s.step,
            "samples_seen": s.samples_seen,
            "online_loss": s.online_loss,
            "online_metric": s.online_metric,
            "metric": self.metric_name,
            "rollbacks": s.rollbacks,
            "dead_lettered": s.dead_lettered,
            "traces": self.probe.traces,
            "retraces": self.retraces,
            "traces_pending": len(self.cold),  # steps traced in spare time, still to come
            "replay_steps": self.replay_steps,
            "linear_solves": self.linear.solves if self.linear else 0,
            **(self.memory.figures() if self.memory else {}),
            **self.replay.figures(),
            **(self.drift.figures() if self.drift else {}),
            **(self.hedge.figures() if self.hedge else {}),
            **self.recent.figures(),
        }

    def _rolled_back(self, reason: str) -> None:
        log.error("%s at step %d; back to the last good snapshot", reason, self.state.step)
        self.state.rollbacks += 1

    def _undone(self) -> None:
        self.guard.undo()
        for head in self._solved():
            head.forget()  # a solve (or write) since the rollback point may be undone
        self.step_size.forget()
        if self.hedge is not None:
            self.hedge.read()

    def _undo(self, batch: Batch, reason: str) -> None:
        """Back to the variables before `batch`, whose samples are not learned."""
        log.warning("undoing a step of %d samples: %s", batch.n, reason)
        self._undone()
        self.state.rollbacks += 1
        self.state.dead_lettered += batch.n
        if self.undone is not None:
            self.undone(reason, batch)


def _ema(prev: float | None, value: float, rate: float) -> float:
    return value if prev is None else prev + rate * (value - prev)
