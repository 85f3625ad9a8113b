"""When the learner may acknowledge entries: once the state that learned them is durable.

That state is a checkpoint when `checkpoint.dir` is set (every training variable and the
counters, `checkpoint.every_s` / `checkpoint.every_samples`), else a published version
(`publish.every_steps` / `publish.every_ms`). Until then the entries stay pending in the
stream, so a crash loses nothing: the restarted learner resumes from that state (its
checkpoint, else its latest published weights: `state`) and trains again on what is
still pending. Non-finite weights are never published nor checkpointed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from streamlearn.config.app import BASE_VARIANT, ModelConfig
from streamlearn.errors import WeightsError
from streamlearn.learner.state import CheckpointDir, from_checkpoint, from_published
from streamlearn.learner.writes import LearnerWrites
from streamlearn.online import codec, tensors
from streamlearn.online.trainer import Trainer
from streamlearn.store.weights import WeightsStore

log = logging.getLogger(__name__)


class Durability:
    """Publishes and checkpoints on their cadences, and acknowledges what they cover."""

    def __init__(
        self,
        cfg: ModelConfig,
        variant: str,
        trainer: Trainer,
        store: WeightsStore,
        writes: LearnerWrites,
        clock: Callable[[], float],
    ) -> None:
        self.cfg = cfg
        self.variant = variant
        self.policy = policy = cfg.learner
        self.trainer = trainer
        self.store = store
        self.writes = writes
        self.clock = clock
        where = [cfg.name] if variant == BASE_VARIANT else [cfg.name, "variants", variant]
        self.checkpoints = (
            CheckpointDir(Path(policy.checkpoint.dir, *where)) if policy.checkpoint.dir else None
        )
        self.steps_since_publish = self._samples_since_checkpoint = 0
        # raises `LeaseLost` once this learner lost its lease (`Learner`'s `lease`): a
        # checkpoint is a file, which the publish script's fence does not cover
        self.fence: Callable[[], None] = lambda: None
        self._last_publish = self._last_checkpoint = clock()

    @property
    def every_s(self) -> float:
        """How often the state becomes durable, at most (seconds)."""
        policy = self.policy
        return policy.checkpoint.every_s if self.checkpoints else policy.publish.every_ms / 1000

    def resume(self) -> str:
        """The trainer's counters and variables from the checkpoint, else from the latest
        published weights; says which."""
        t = self.trainer
        if self.checkpoints and (state := from_checkpoint(self.checkpoints, t.model, t.variables)):
            t.state = state
            found = f"resumed from checkpoint {self.checkpoints.path}"
        elif published := from_published(self.store, t.model, self.variant):
            version, t.state.step, t.state.samples_seen = published
            found = f"resumed from published weights v{version}"
        else:
            found = "fresh weights"
        t.state.version = max(t.state.version, self.store.latest_version())
        return found

    def trained(self, samples: int) -> None:
        """A step learned `samples`."""
        self.steps_since_publish += 1
        self._samples_since_checkpoint += samples

    def settled(self) -> bool:
        """Whether every sample trained on is in the durable state (no step since the
        last publish, or no sample since the last checkpoint)."""
        if self.checkpoints:
            return not self._samples_since_checkpoint
        return not self.steps_since_publish

    def caught_up(self) -> None:
        """Nothing fresh is waiting: publish what was learned (fresh or replayed steps) now
        rather than at the next cadence, so that actors answer with weights that know the
        newest samples, at most once per `publish.min_ms`. Under a backlog the learner is
        never caught up, and `publish.every_*` alone rule. The heads set from the replay
        buffer are set first (spare time, a few ms): a version published between a step
        and its spare time would serve them as they were before its samples (at a stream's
        start, the prior), until the next publish."""
        if self.publish_wait_s() == 0:
            self.publish(heads=True)

    def pausing(self) -> None:
        """The learner stops for a while (a trace: a second or more): what it learned is
        published now, whatever `publish.min_ms` says (the heads set first, as above)."""
        if self.steps_since_publish and self.writes.publishing.due():
            self.publish(heads=True)

    def publish_wait_s(self) -> float | None:
        """Seconds until `caught_up` may publish; None with nothing to publish, or while
        Redis refuses publishes (their backoff rules then)."""
        if not self.steps_since_publish or not self.writes.publishing.due():
            return None
        since_ms = (self.clock() - self._last_publish) * 1000
        return max(0.0, self.policy.publish.min_ms - since_ms) / 1000

    def publish_due(self) -> bool:
        """Whether `tick` publishes now (`publish.every_steps` or `every_ms` reached)."""
        policy = self.policy
        return bool(
            self.steps_since_publish
            and (
                self.steps_since_publish >= policy.publish.every_steps
                or (self.clock() - self._last_publish) * 1000 >= policy.publish.every_ms
            )
            and self.writes.publishing.due()
        )

    def tick(self) -> None:
        """Publish, checkpoint and acknowledge when they are due."""
        now, policy = self.clock(), self.policy
        if self.publish_due():
            self.publish()
        if self.checkpoints is None:
            if self.writes.unacked and not self.steps_since_publish:
                self.writes.made_durable()  # dead letters only
        elif (self._samples_since_checkpoint or self.writes.unacked) and (
            now - self._last_checkpoint >= policy.checkpoint.every_s
            or self._samples_since_checkpoint >= policy.checkpoint.every_samples
        ):
            self.checkpoint()
        self.writes.maybe_trim()

    def finish(self) -> None:
        """On the way out: publish and checkpoint what was learned since the last time,
        and acknowledge what that covers."""
        if self.steps_since_publish:
            self.publish()
        if self.checkpoints and (self._samples_since_checkpoint or self.writes.unacked):
            self.checkpoint()
        elif self.checkpoints is None and self.writes.unacked and not self.steps_since_publish:
            self.writes.made_durable()  # dead letters only
        self.writes.acknowledged()

    def publish(self, heads: bool = False) -> None:
        """Publish the current weights as a new version; non-finite weights never leave.
        When Redis refuses, training goes on and `tick` tries again after the backoff.
        With `heads` (time to spare), the heads are set from the buffer first
        (`Trainer.set_heads`), over the statistics just flushed: then the linear head
        needs no second solve (`settle`)."""
        t = self.trainer
        started = self.clock()  # `publish.min_ms` counts from one publish's start to the next's
        t.flush_statistics()  # the actors get the statistics of every sample trained on
        if heads:
            t.set_heads()
        t.settle()  # and the linear head solved, not as the replay left it
        arrays = tensors.get_arrays(t.model)
        try:
            codec.check_fits(arrays, t.spec)
        except WeightsError as exc:
            t.guard.back(f"refused to publish: {exc}")
            return
        s = t.state
        meta = {"model": self.cfg.name, "step": str(s.step), "variant": self.variant}
        meta["samples_seen"] = str(s.samples_seen)
        if self.store.lease is not None:  # which learner published it
            meta["learner"] = self.store.lease.token
        self._last_publish = started
        version = self.writes.publish(s.version, codec.encode(arrays, meta))
        if version is None:
            return
        s.version = version
        self.steps_since_publish = 0
        if self.checkpoints is None:
            self.writes.made_durable()

    def checkpoint(self) -> None:
        """Save every training variable and the counters, then acknowledge what they cover."""
        t = self.trainer
        if self.checkpoints is None or not t.guard.mark():
            return
        self.fence()
        arrays = dict(zip(tensors.training_names(t.model), t.guard.good, strict=True))
        try:
            self.checkpoints.save(arrays, {**asdict(t.state), "model": self.cfg.name})
        except OSError as exc:  # entries stay pending; the next interval tries again
            log.error("checkpoint to %s failed: %s", self.checkpoints.path, exc)
        else:
            self._samples_since_checkpoint = 0
            self.writes.made_durable()
        self._last_checkpoint = self.clock()
