"""The actor: serves predictions over MQTT with dynamic batching and hot-reloaded weights.

Requests are batched as they queue: a pass takes what is waiting, up to `max_batch` rows,
and a request that finds the actor idle is computed at once (`inbox.gather`). Each batch is
run in one forward pass (numpy for a built-in model, TensorFlow for a factory's:
`streamlearn.actor.runtimes`) and answered one reply per request with the version used. A
`WeightsReloader` stages new versions in the background; the serving loop swaps them in
between batches, so a reload never fails, drops or delays a request.

A built-in model answers from its first request: before the learner's first version it
serves the model's initial state, which predicts the prior (`version` 0).

A key-only request (models with a window) brings only the newest step; the earlier ones
are its key's stored observations (`streamlearn.actor.keyed`). A request that names a
version or a label is answered by that version, kept loaded (`streamlearn.actor.versions`);
one not loaded waits while the loader thread loads it (`streamlearn.actor.loader`).
Requests come in by MQTT and, when `actor.http_port` is set, by the Open Inference Protocol
over HTTP (`streamlearn.actor.http`): both doors share the inbox, and so the batches.

Replies go out with QoS 0: a reply is useful only while its client waits, and a lost one
is that client's timeout and retry, as with HTTP. QoS 1 costs a broker acknowledgement per
reply and, behind paho's 20-message in-flight window, caps the reply rate.

Whatever a request holds, it costs the actor one error reply at most: the inbox is bounded
and requests past their deadline are not computed (`streamlearn.actor.inbox`), a payload is
decoded once, size and nesting checked first, rows capped, a reply goes only to a topic in
the request's reply space (`streamlearn.actor.replies`), and an exception while serving one
request or batch becomes error replies, never the end of the serving loop.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import cast

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties

from streamlearn.actor import inbox, runtimes
from streamlearn.actor.inbox import Pending
from streamlearn.actor.kept import Keeper
from streamlearn.actor.keyed import complete_windows
from streamlearn.actor.loader import VersionLoader
from streamlearn.actor.reloader import WeightsReloader
from streamlearn.actor.replies import Publish, PublishMany, Replier, ReplyRoutes
from streamlearn.actor.runtimes import Servable
from streamlearn.actor.states import States
from streamlearn.actor.versions import Group, KeptVersions
from streamlearn.config import cpus
from streamlearn.config.app import BASE_VARIANT, ModelConfig
from streamlearn.contract.names import Names
from streamlearn.online import buckets
from streamlearn.store.pending import PendingStore
from streamlearn.store.weights import WeightsStore
from streamlearn.store.windows import WindowStore

log = logging.getLogger(__name__)


class Actor:
    """Answers one model's prediction requests; `status()` says what it serves.

    For a model with a window, key-only requests read `windows` (by default a
    `WindowStore` on the weights store's Redis).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        store: WeightsStore,
        names: Names,
        publish: Publish,
        actor_id: str = "actor",
        windows: WindowStore | None = None,
        publish_many: PublishMany | None = None,
    ) -> None:
        self.cfg = cfg
        self.policy = cfg.actor
        self.names = names
        self.publish = publish
        self.replier = Replier(publish, cfg.name, self.policy.max_reply_bytes, publish_many)
        self.admission = inbox.Admission(cfg, ReplyRoutes(names), self.replier)
        self.id = actor_id
        self.status_topic = names.topic(f"actors/{actor_id}")
        self.buckets = buckets.ladder(self.policy.max_batch)  # a TensorFlow pass's shapes
        self.runtime, self.runtime_reason = runtimes.choose(cfg)
        self.cpus = cpus.usable_cpus()  # its pools sized before a model is built
        self.threads = runtimes.size_threads(self.runtime, self.cpus.usable)
        self._build = runtimes.builder(self.runtime, self.buckets)
        # the model's initial state answers until the first version (its prior)
        self.answers_initial = runtimes.starts_answered(cfg)
        serving, *spares = (self._build(cfg) for _ in range(3))  # see WeightsReloader
        self.model: Servable = serving
        self.reloader = WeightsReloader(
            store, spares, self.policy.reload_check_ms, build=self._build_variant
        )
        self.variant = BASE_VARIANT  # of the model's variants, the one whose weights serve
        if windows is None and cfg.window is not None:
            partitions = cfg.ingest.partitions  # a key's window is in its key's partition
            windows = WindowStore(store.redis, names, cfg.window, cfg.inputs, partitions=partitions)
        self.windows = windows
        self.keeper = Keeper(PendingStore(store.redis, names, cfg.labels))  # for labels
        reloader = self.reloader
        self.versions = KeptVersions(
            store,
            self._build_variant,
            lambda _model: None,
            self.policy.kept_versions,
            epoch=lambda: reloader.changes,
        )
        self.version = 0
        self.loaded_at: float | None = None
        self.batches = 0
        self.reloads = 0
        self.failed = 0  # requests whose batch raised while served (answered with an error)
        self.shared_batches = 0  # forward passes that answered both HTTP and MQTT requests
        # Per-request observers (e.g. Prometheus histograms), set when metrics are on.
        self.observe_latency: Callable[[float], object] | None = None
        self.observe_batch: Callable[[int], object] | None = None
        self.heartbeat: Callable[[], object] = lambda: (
            None
        )  # each turn (`streamlearn.observe.health`)
        # The broker's delay of a QoS 1 request's reply, in ms (`streamlearn.observe.broker_delay`)
        self.broker_delay_ms: Callable[[], float | None] = lambda: None
        self.states: States | None = None  # `[models.NAME.state]`: devices' predictions
        self.inbox = inbox.Inbox(
            self.policy.max_queued_requests,
            self.policy.max_queued_bytes,
            self.policy.request_deadline_ms,
            cfg.ingest.max_payload_bytes,
            names.predict_topic,  # a share per client of `predict/{client}`
        )
        self.loader = VersionLoader(  # requests for a version not held wait for it there
            self.versions,
            self.inbox.offer,
            self.policy.max_queued_requests,
            self.policy.max_queued_bytes,
            self.policy.request_deadline_ms,
        )
        self._status_due = 0.0
        self._status_version = -1
        self._rate_from = (time.monotonic(), 0)  # (when, served) of the last status

    @property
    def served(self) -> int:
        """Requests answered (or whose reply could not be sent)."""
        return self.replier.sent + self.replier.unsent

    @property
    def answers(self) -> bool:
        """Whether a request gets a prediction now: a version is loaded, or the model's
        initial state answers (a built-in model; `/readyz`, `/v2/health/ready`)."""
        return self.version > 0 or self.answers_initial

    @property
    def errors(self) -> int:
        return self.replier.errors

    def on_message(self, _client: mqtt.Client, _userdata: object, msg: mqtt.MQTTMessage) -> None:
        """paho callback (network thread): hand over and return at once; never blocks."""
        self.inbox.put(msg)

    def on_connack(self, properties: Properties | None) -> None:
        """Replies must fit the broker's maximum packet size (MQTT v5 CONNACK)."""
        self.replier.max_packet = getattr(properties, "MaximumPacketSize", None)

    def run(self, stop: threading.Event | None = None, max_requests: int | None = None) -> int:
        """Serve until `stop` is set or `max_requests` were answered; returns the count."""
        stop = stop or threading.Event()
        start = self.served
        self.reloader.poll(block=True)
        self.reload()
        self.reloader.start()
        self.loader.start()
        try:
            while not stop.is_set() and (
                max_requests is None or self.served - start < max_requests
            ):
                self.heartbeat()
                self._maybe_publish_status()
                batch = self._gather(idle_s=0.1)
                self.reload()  # after the wait: a version staged meanwhile answers this batch
                for p in self.loader.expired(time.monotonic()):
                    self.admission.admit(p)  # past its deadline: the deadline error reply
                if batch:
                    self.serve(batch)
                if self.states is not None:  # between batches, with the version serving
                    self.states.serve(self)
        finally:
            self.loader.stop()
            self.reloader.stop()
        return self.served - start

    def drain(self, idle_s: float = 0.25, limit_s: float = 5.0) -> int:
        """Answer requests already received until none came for `idle_s`, at most `limit_s`.

        Called after unsubscribing, so that a stopping actor answers what the broker gave it.
        """
        start, deadline = self.served, time.monotonic() + limit_s
        while time.monotonic() < deadline:
            batch = self._gather(idle_s)
            if batch is None:
                break
            if batch:
                self.serve(batch)
        for p in self.loader.take_all():
            self._reply_error(p, f"the actor stopped before version {p.version} was loaded")
        return self.served - start

    def reload(self) -> None:
        """Swap in the staged version, if there is one: two references, between batches."""
        staged = self.reloader.take(self.model)
        if staged is not None:
            self.model, self.version = staged.model, staged.version
            self.variant = staged.variant
            self.loaded_at = staged.fetched_at
            self.reloads += 1
            log.debug("serving weights v%d (staged in %.1f ms)", self.version, staged.stage_ms)

    def serve(self, batch: list[Pending]) -> None:
        """Answer gathered requests with one forward pass per `max_batch` rows.

        Whatever goes wrong answers the batch's requests with an error and returns.
        """
        try:
            self._serve(batch)
        except Exception as exc:  # a bug or a failed computation: the loop must go on
            log.exception("serving a batch of %d requests failed", len(batch))
            reason = f"internal error: {type(exc).__name__}: {exc}"
            for p in batch:
                if not p.done and not self.loader.holds(p):  # a parked one rejoins later
                    self.failed += 1
                    self._reply_error(p, reason)

    def _serve(self, batch: list[Pending]) -> None:
        if self.version == 0 and not self.answers_initial:  # the first may just have come
            self.reloader.poll(block=True)
            self.reload()
        if self.version == 0 and not self.answers_initial:
            reason = f"no weights published yet for model {self.cfg.name!r}"
            for p in batch:
                self._reply_error(p, reason)
            return
        serving = (self.version, self.variant)
        latest, labels = self.reloader.latest_seen, self.reloader.labels
        groups, misses = self.versions.split(batch, serving, latest, labels, self._reply_error)
        try:
            for p in misses:  # loaded off this thread; they rejoin a following batch
                if (refused := self.loader.park(p)) is not None:
                    self._reply_error(p, refused)
            if self.windows is not None:  # once a request is in a batch: not while parked
                ready = [p for group in groups for p in group.requests]
                complete_windows(ready, self.windows, self._reply_error)
            for group in groups:
                group.requests = [p for p in group.requests if not p.done]
                if group.requests:
                    self._answer(group)
        finally:
            self.versions.release(groups)

    def _answer(self, group: Group) -> None:
        """One forward pass for a group of requests (of one version), and their replies."""
        batch = group.requests
        x = batch[0].x if len(batch) == 1 else np.concatenate([p.x for p in batch])
        y = self.predict(x, group.model)
        self.batches += 1
        http = sum(p.answer is not None for p in batch)
        self.shared_batches += 0 < http < len(batch)  # both doors' requests in one pass
        rows = (y if self.cfg.task == "multiclass" else y[:, 0]).tolist()
        version, row = group.version, 0
        of = {"model": self.cfg.name, "variant": group.variant}
        # Kept before the replies go: a label sent the moment its reply arrives finds it.
        self.keeper.keep(batch, y, version)  # no Redis call unless a request has an id
        with self.replier.joined():  # the batch's MQTT replies in one write
            for p in batch:
                n = len(p.x)
                out = rows[row : row + n] if p.batched else rows[row]
                row += n
                body = {"id": p.id, "y": out, "version": version, **of}
                p.done = True
                self.replier.send(p.topic, p.correlation, body, p.answer)
        if self.observe_latency is not None:
            done = time.monotonic()
            for p in batch:
                self.observe_latency(done - p.arrived)
        if self.observe_batch is not None:
            self.observe_batch(len(x))

    def predict(self, x: np.ndarray, model: Servable | None = None) -> np.ndarray:
        """Forward pass over any number of rows, `max_batch` at a time (`model`: a kept
        version's; default: the one serving)."""
        forward = model or self.model
        step = self.policy.max_batch
        out = [cast(np.ndarray, forward(x[i : i + step])) for i in range(0, len(x), step)]
        return out[0] if len(out) == 1 else np.concatenate(out)

    def status(self) -> dict[str, object]:
        """The version served, how long ago it was loaded, and what was refused."""
        now = time.time()
        since, served = self._rate_from
        elapsed = time.monotonic() - since
        return {
            "actor": self.id,
            "model": self.cfg.name,
            "version": self.version,
            "variant": self.variant,
            "runtime": self.runtime,  # numpy or tensorflow (`streamlearn.actor.runtimes`)
            "runtime_reason": self.runtime_reason,
            "cpus": {**self.cpus.status(), **self.threads},  # what its pools were sized to
            "broker_delay_ms": self.broker_delay_ms(),  # None: not measured
            "latest_seen": self.reloader.latest_seen,
            "pinned": self.reloader.pinned,  # `streamlearn pin`: served instead of the latest
            "loaded_at": self.loaded_at,
            "weights_age_s": None if self.loaded_at is None else round(now - self.loaded_at, 3),
            "reloads": self.reloads,
            "served": self.served,
            "requests_per_s": round((self.served - served) / elapsed, 1) if elapsed > 0 else 0.0,
            "errors": self.errors,
            "requests_refused": self.admission.refused + self.replier.too_big,
            "requests_expired": self.admission.expired,
            "requests_shed": self.inbox.shed,
            "requests_failed": self.failed + self.admission.failed,
            "batches": self.batches,
            "shared_batches": self.shared_batches,
            "versions_kept": self.versions.kept(),
            "requests_waiting_for_versions": self.loader.parked,
            "predictions_kept": self.keeper.kept,
            "keep_failures": self.keeper.failures,
            "refused": {str(v): reason for v, reason in self.reloader.refused.items()},
            "updated_at": now,
        }

    def metrics(self) -> dict[str, float | int | None]:
        """For `streamlearn.observe.metrics` (Prometheus): names ending in `_total` are counters."""
        delay_ms = self.broker_delay_ms()
        return {
            "replies_total": self.replier.sent,
            "error_replies_total": self.errors,
            "unsent_replies_total": self.replier.unsent,
            "refused_requests_total": self.admission.refused + self.replier.too_big,
            "expired_requests_total": self.admission.expired,
            "shed_requests_total": self.inbox.shed,
            "failed_requests_total": self.failed + self.admission.failed,
            "batches_total": self.batches,
            "shared_batches_total": self.shared_batches,
            "version_loads_total": self.versions.loads,
            "requests_waiting_for_versions": self.loader.parked,
            "predictions_kept_total": self.keeper.kept,
            "keep_failures_total": self.keeper.failures,
            "reloads_total": self.reloads,
            "refused_versions_total": self.reloader.refusals,
            "version": self.version,
            "latest_version_seen": self.reloader.latest_seen,
            "weights_age_seconds": None if self.loaded_at is None else time.time() - self.loaded_at,
            "queued_requests": self.inbox.qsize(),
            "broker_delay_seconds": None if delay_ms is None else delay_ms / 1000,
        }

    def publish_status(self) -> None:
        """Retained on `{prefix}/{model}/actors/{id}`; refreshed on reload and periodically."""
        self.publish(self.status_topic, json.dumps(self.status()).encode(), 1, True, None)
        self._rate_from = (time.monotonic(), self.served)
        self._status_version = self.version
        self._status_due = time.monotonic() + self.policy.status_every_ms / 1000

    def clear_status(self) -> None:
        """Remove the retained status (the broker does it for an actor that dies)."""
        self.publish(self.status_topic, b"", 1, True, None)

    # -- helpers -------------------------------------------------------------------------

    def _build_variant(self, variant: str) -> Servable:
        """A model of one of the model's variants, ready to serve (the reload thread)."""
        return self._build(self.cfg.variant(variant))

    def _gather(self, idle_s: float) -> list[Pending] | None:
        """Valid requests for one pass (`inbox.gather`); None when none arrived for `idle_s`."""
        batch, wait_ms = self.policy.max_batch, self.policy.max_wait_ms
        return inbox.gather(self.inbox, self.admission, batch, wait_ms, idle_s)

    def _reply_error(self, p: Pending, reason: str) -> None:
        p.done = True
        self.replier.error(p.topic, p.correlation, p.id, reason, p.answer)

    def _maybe_publish_status(self) -> None:
        if self.version != self._status_version or time.monotonic() >= self._status_due:
            self.publish_status()
