"""What a learner tells the world: its status, its metrics, and its place among the variants.

The status goes to a sink every `status_every_ms`; the worker's sink (`StatusPublisher`)
publishes it retained on `streamlearn/{model}/status` with samples/s added, and writes
TensorBoard curves when `tensorboard_dir` is set. With variants, the figures go to the
promoter first (`streamlearn.learner.variants`), which may promote the learner; only the champion's
learner speaks for the model, with every variant's figures side by side.

The learner and ingest also say that they are there (`Presence`): a retained marker the
broker clears when the process dies, so that a dead learner's retained status, which stays,
is not taken for a live one (`streamlearn.observe.monitor`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
import redis

from streamlearn.config.app import ModelConfig
from streamlearn.contract.names import Names
from streamlearn.learner.lease import LeaseKeeper
from streamlearn.learner.tensorboard import Rate, ScalarLog
from streamlearn.learner.variants import Promoter, Promotion
from streamlearn.learner.writes import LearnerWrites
from streamlearn.online.trainer import Trainer
from streamlearn.store.fields import FieldTotals
from streamlearn.store.pending import PendingStore, served_metric

log = logging.getLogger(__name__)

StatusSink = Callable[[dict[str, object]], None]


class Reporter:
    """One learner's status and metrics, and its reports to the promoter and the sink."""

    def __init__(
        self,
        cfg: ModelConfig,
        variant: str,
        trainer: Trainer,
        writes: LearnerWrites,
        sink: StatusSink | None,
        promoter: Promoter | None,
        unpublished: Callable[[], int] = lambda: 0,
        lease: LeaseKeeper | None = None,
    ) -> None:
        """`unpublished()`: steps taken since the last published version; `lease`: the
        learner's, whose holder the status names."""
        self.model = cfg.name
        self.inputs = cfg.inputs_status
        self.unpublished = unpublished
        self.variant = variant
        self.trainer = trainer
        self.writes = writes
        self.sink = sink
        self.promoter = promoter
        self.lease = lease
        queue = writes.queue
        self.pending = PendingStore(queue.redis, queue.names, cfg.labels)
        self.served_metric = served_metric(cfg.task)
        self.served: dict[str, float | int | None] | None = None  # as last read
        self.field_totals = FieldTotals(queue.redis, queue.names)
        self.fields: dict[str, Any] | None = None  # as last read

    @property
    def active(self) -> bool:
        """Whether there is anyone to report to."""
        return self.sink is not None or self.promoter is not None

    def status(self) -> dict[str, object]:
        fields = self.read_fields()
        return {
            "model": self.model,
            "inputs": self.inputs,
            "version": self.trainer.state.version,
            "unpublished_steps": self.unpublished(),
            **self.trainer.figures(),
            "variant": self.variant,
            **self.writes.status(),
            "served": self.read_served(),
            **({"fields": fields} if fields else {}),
            **({"lease": self.lease.status()} if self.lease else {}),
            "updated_at": time.time(),
        }

    def read_served(self) -> dict[str, float | int | None] | None:
        """The served score (`streamlearn.store.pending`): labels joined to the predictions
        actors served. Redis unavailable: the last one read (the status must still go)."""
        try:
            self.served = self.pending.served(self.served_metric)
        except redis.RedisError as exc:
            log.debug("served score unavailable: %s", exc)
        return self.served

    def read_fields(self) -> dict[str, Any] | None:
        """What named payloads held besides their inputs, counted by every ingest process
        (`FieldTotals`); None before any was counted. Redis unavailable: the last read."""
        try:
            self.fields = self.field_totals.read()
        except redis.RedisError as exc:
            log.debug("field counts unavailable: %s", exc)
        return self.fields

    def metrics(self) -> dict[str, float | int | None]:
        """For `streamlearn.observe.metrics` (Prometheus): names ending in `_total` are counters."""
        t = self.trainer
        s = t.state
        return {
            "steps_total": s.step,
            "samples_total": s.samples_seen,
            "rollbacks_total": s.rollbacks,
            "dead_lettered_samples_total": s.dead_lettered,
            "traces_total": t.probe.traces,
            "retraces_total": t.retraces,  # after warm-up: 0
            "version": s.version,
            "online_loss": s.online_loss,
            "online_metric": s.online_metric,
            "replay_steps_total": t.replay_steps,
            "replayed_samples_total": t.replay.replayed,
            "replay_buffer_samples": t.replay.size,
            "replay_buffer_bytes": t.replay.nbytes,
            "drifts_detected_total": t.drift.detected if t.drift else 0,
            **self.writes.metrics(),
            **served_metrics(self.served, self.served_metric),
            **(self.promoter.metrics() if self.promoter else {}),
        }

    def report(self, promoted: Callable[[], None], compete: bool = True) -> None:
        """Status to the sink; with variants, figures to the promoter first (unless not
        `compete`), and the status only from the champion. `promoted()` runs when this
        learner has just become the champion (it publishes, so actors switch now)."""
        status = self.status()
        if self.promoter is not None:
            if compete and self.writes.report_figures(self.promoter, status) is not None:
                promoted()
                status = self.status()
            status.update(self.promoter.view())
            if not self.promoter.is_champion:
                return
        if self.sink:
            self.sink(status)


def served_metrics(
    served: dict[str, float | int | None] | None, metric: str
) -> dict[str, float | int | None]:
    """The served score as Prometheus figures, from the last status (no Redis at scrape)."""
    served = served or {}
    labels, loss = served.get("labels"), served.get("loss")
    return {
        "served_labels_total": labels,
        "served_unknown_labels_total": served.get("unknown"),
        "served_loss": loss,
        # the loss summed over the labels: with `served_labels_total`, the served loss of
        # any window (an alert compares the last hour with the one before)
        "served_loss_sum_total": None if loss is None or labels is None else loss * labels,
        f"served_{metric}": served.get(metric),
        "served_label_delay_p50_seconds": served.get("delay_p50_s"),
        "served_label_delay_p95_seconds": served.get("delay_p95_s"),
    }


class StatusPublisher:
    """The worker's status sink: retained MQTT status (with samples/s), TensorBoard curves,
    and the champion announcements."""

    def __init__(
        self,
        client: paho.Client,
        names: Names,
        curves: ScalarLog | None,
        cpus: dict[str, Any] | None = None,
    ) -> None:
        """`cpus`: what the worker sized its threads to, shown in each status."""
        self.client = client
        self.names = names
        self.curves = curves
        self.cpus = cpus
        self.rate = Rate()

    def __call__(self, status: dict[str, Any]) -> None:
        status["samples_per_s"] = self.rate.update(int(status["samples_seen"]))
        if self.cpus is not None:
            status["cpus"] = self.cpus
        self.client.publish(self.names.status_topic, json.dumps(status), qos=1, retain=True)
        if self.curves is not None:
            self.curves.write(status)

    def announce(self, promotion: Promotion) -> None:
        self.client.publish(self.names.champion_topic, promotion.to_json(), qos=1, retain=True)
