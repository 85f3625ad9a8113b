"""Every Prometheus metric the workers expose, declared once: role, name, type, labels, help.

The roles count in plain dicts (`metrics()`, read at scrape time by
`streamlearn.observe.metrics.SnapshotCollector`); this catalog gives each figure its help
text and the name of its extra label, and docs/gen_reference.py writes the reference page
from it. A figure a role emits that is not here is still exposed (its help its name) and
logged once. Every family has the label `model` (a learner's also `variant`); names are as
scraped (`streamlearn_{role}_{name}`, counters ending in `_total`), but for those of every
worker (`streamlearn_build_info`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]
ROLES = ("ingest", "learner", "actor")
EVERY_ROLE = ""  # the role of a metric every worker serves: `streamlearn_{name}`


@dataclass(frozen=True)
class Metric:
    role: str
    name: str  # as the role's `metrics()` names it: counters end in `_total`
    kind: Kind
    help: str
    label: str | None = None  # the extra label of a dict-valued figure
    healthy: str = ""  # what a healthy value looks like, where that is known (`HEALTHY`)

    @property
    def full_name(self) -> str:
        return f"streamlearn_{self.role}_{self.name}" if self.role else f"streamlearn_{self.name}"

    @property
    def labels(self) -> tuple[str, ...]:
        fixed = ("model", *WORKER_LABELS.get(self.role, ()))
        return fixed if self.label is None else (*fixed, self.label)


# Labels every family of a role has besides `model`, the same on all its series: a learner's
# variant (`base` unless `--variant`); `build_info`'s role and package version.
WORKER_LABELS = {"learner": ("variant",), "": ("role", "version")}


def _role(role: str, *entries: tuple[str, str] | tuple[str, str, str]) -> list[Metric]:
    """`(name, help[, label])`: a counter when the name ends in `_total`, else a gauge."""
    found = []
    for name, text, *label in entries:
        kind: Kind = "counter" if name.endswith("_total") else "gauge"
        found.append(Metric(role, name, kind, text, label[0] if label else None))
    return found


_INGEST = _role(
    "ingest",
    ("messages_total", "MQTT messages received (dead letters included)"),
    ("source_messages_total", "messages received per `[[sources]]` filter", "source"),
    ("samples_total", "samples appended to the stream"),
    ("duplicate_samples_total", "samples dropped as seen before (id within dedup_window_s)"),
    (
        "dedup_share_exceeded_total",
        "sample ids appended but not remembered for de-duplication: their sender "
        "(samples/{client}, labels/{client}) past its dedup_sender_share of a generation",
    ),
    ("deadletters_total", "messages or samples dead-lettered, by reason", "reason"),
    ("redis_errors_total", "Redis calls that failed (retried)"),
    ("back_pressure_pauses_total", "times ingest held back acknowledgements under a backlog"),
    ("observations_total", "keyed observations stored in their devices' windows"),
    ("duplicate_observations_total", "keyed observations dropped as already stored"),
    ("late_observations_total", "keyed observations older than everything their key keeps"),
    (
        "short_window_observations_total",
        "labelled observations with fewer than `window` steps known (no sample made)",
    ),
    (
        "evicted_windows_total",
        "windows deleted to keep ingest.max_devices: a sender's own idlest, or the idlest of "
        "all for a new device's first",
    ),
    ("extra_fields_total", "fields of named samples the model does not use (ignored)"),
    ("missing_inputs_total", "inputs missing from named samples, by field", "field"),
    ("unseen_categories_total", "categorical values not configured, by field", "field"),
    ("unlabeled_samples_total", "named samples without their target (not trained on)"),
    ("labels_joined_total", "labels joined with their kept prediction into a sample"),
    ("labels_unknown_total", "labels whose prediction is not kept (expired, evicted, unknown)"),
    ("labels_duplicate_total", "labels of predictions already joined (counted, not stored)"),
    (
        "assembled_samples_total",
        "samples formed from held readings ([assembly]), by a label or on a period, before "
        "de-duplication (a redelivered label, or every ingest process's periodic one, counts "
        "again and is stored once)",
    ),
    ("periodic_samples_total", "of those, formed on a period (assembly.every_s)"),
    (
        "evicted_held_keys_total",
        "held keys deleted to keep assembly.max_devices: a sender's own idlest, or the "
        "idlest of all for a new device's first",
    ),
    (
        "sparkplug_messages_total",
        "Sparkplug B messages judged against their edge node's state, by status (ok, birth, "
        "death, unborn, unknown_alias, gap, stale_death, too_many_devices, too_many_aliases)",
        "status",
    ),
    (
        "sparkplug_skipped_metrics_total",
        "Sparkplug metrics not read, by reason (unsupported type, historical, bad_name, ...)",
        "reason",
    ),
    ("sparkplug_rebirths_total", "NCMD rebirth requests this process published"),
    ("sparkplug_dead_keys_total", "device keys an NDEATH or DDEATH marked missing"),
    (
        "sparkplug_late_messages_total",
        "Sparkplug messages behind their node's newest seq (overtaken, or redelivered): "
        "their values not held",
    ),
    ("sparkplug_unknown_aliases_total", "metrics of an alias their birth did not declare"),
    ("qos0_dropped_total", "QoS 0 messages dropped while the inbox was full"),
    ("backlog_samples", "samples in the stream not yet acknowledged by the learner"),
    ("holding", "1 while ingest holds back acknowledgements (backlog over its limit)"),
    ("inbox_messages", "messages received and not yet processed"),
    ("inbox_bytes", "bytes of those messages' payloads"),
)

_LEARNER = _role(
    "learner",
    ("steps_total", "train steps on fresh samples"),
    ("samples_total", "samples trained on"),
    ("rollbacks_total", "steps undone (a non-finite loss or weights)"),
    ("dead_lettered_samples_total", "samples of undone steps, dead-lettered"),
    ("traces_total", "train steps traced (compiled); each bucket size once at warm-up"),
    ("retraces_total", "traces after warm-up (should stay 0)"),
    ("version", "the weights version last published"),
    ("online_loss", "test-then-train loss on the latest samples"),
    ("online_metric", "test-then-train metric of the served prediction (accuracy or MAE)"),
    ("replay_steps_total", "steps on samples replayed from the replay buffer"),
    ("replayed_samples_total", "samples replayed"),
    ("replay_buffer_samples", "samples in the replay buffer"),
    ("replay_buffer_bytes", "the replay buffer's memory, in bytes"),
    ("drifts_detected_total", "lasting rises of the online loss (the replay buffer forgot)"),
    ("redis_oom", "1 while Redis refuses writes for want of memory"),
    *(
        (f"{call}_failures_total", f"Redis {call} calls refused or failed (retried)")
        for call in ("publish", "ack", "trim", "status", "read", "deadletter")
    ),
    ("unacknowledged_entries", "stream entries trained on and not yet acknowledged"),
    ("served_labels_total", "labels joined to served predictions (the served score's count)"),
    ("served_unknown_labels_total", "labels whose served prediction was not known"),
    ("served_loss", "loss of the served predictions, over the labelled window"),
    ("served_loss_sum_total", "the served loss summed over the labels"),
    ("served_accuracy", "accuracy of the served predictions (classifiers)"),
    ("served_mae", "mean absolute error of the served predictions (regression)"),
    ("served_label_delay_p50_seconds", "median delay from prediction to its label"),
    ("served_label_delay_p95_seconds", "95th percentile delay from prediction to its label"),
    ("queue_length", "entries in the model's sample stream (every partition)"),
    ("pending", "entries this learner's group read and has not acknowledged"),
    ("deadletters", "entries in the model's dead-letter stream"),
    ("latest_version", "the newest weights version in Redis"),
    ("pinned_version", "the pinned version actors serve (absent when none is pinned)"),
    ("backlog_samples", "samples waiting for this learner"),
    ("lease_held", "1 while this learner holds its lease (may publish), 0 while it waits"),
    ("lease_taken_total", "times this learner took its lease (started, or took over)"),
    ("lease_lost_total", "times it lost its lease (another learner took over) and waited"),
    (
        "promotions_fenced_total",
        "promotions of its variant refused: its lease was another's or gone (with variants)",
    ),
)

_EVERY = [
    Metric(
        EVERY_ROLE,
        "build_info",
        "gauge",
        "1, labelled with the worker's role and streamlearn's version (a rollout shows as "
        "two versions at once)",
    )
]

_ACTOR = [
    *_role(
        "actor",
        ("replies_total", "replies sent"),
        ("error_replies_total", "error replies sent"),
        ("unsent_replies_total", "replies not sent: no valid reply topic, or refused by paho"),
        ("refused_requests_total", "requests refused (what they hold or ask; a reply too big)"),
        ("expired_requests_total", "requests past their deadline: an error reply, not computed"),
        ("shed_requests_total", "requests dropped while the queue was full"),
        ("failed_requests_total", "requests whose reading or batch raised (an error reply)"),
        ("batches_total", "forward passes"),
        ("shared_batches_total", "forward passes that answered both HTTP and MQTT requests"),
        ("version_loads_total", "versions loaded for requests that name one"),
        ("requests_waiting_for_versions", "requests waiting for the version they name to load"),
        ("predictions_kept_total", "predictions kept for a label that comes later"),
        ("keep_failures_total", "batches whose predictions could not be kept"),
        (
            "pending_evicted_total",
            "kept predictions dropped before their TTL to keep labels.max_pending and "
            "max_pending_bytes",
        ),
        (
            "pending_share_evicted_total",
            "kept predictions of a client past its labels.sender_share: its own soonest to "
            "expire, dropped before their TTL",
        ),
        ("reloads_total", "weights versions loaded by hot reload"),
        ("refused_versions_total", "versions refused as unusable (the previous one is served)"),
        ("version", "the weights version served"),
        ("latest_version_seen", "the newest version announced"),
        ("weights_age_seconds", "seconds since the served weights were loaded"),
        ("queued_requests", "requests received and not yet served"),
        ("ready", "1 while this actor is ready (/readyz: connected, with weights to answer)"),
        (
            "broker_delay_seconds",
            "how long the broker holds the reply to a QoS 1 request, median of the last "
            "probe (over 0.01: Nagle's algorithm, set `set_tcp_nodelay true`); absent "
            "until measured",
        ),
        (
            "http_unproven_closed_total",
            "HTTP connections without the token closed before they showed it: idle 2 s, or "
            "the oldest of 32 (of one address: of 8) when another came",
        ),
        (
            "http_peer_refused_total",
            "HTTP connections answered 503 and closed: their address held "
            "http_max_connections_per_peer",
        ),
        (
            "http_responses_total",
            "answers of the HTTP door by status, refusals included (401, 408, 413, and 503 "
            "for a connection past the cap)",
            "code",
        ),
        (
            "grpc_responses_total",
            "answers of the gRPC door by status code (OK, INVALID_ARGUMENT, UNAUTHENTICATED, "
            "...), refusals included; not the calls grpcio refuses itself (past grpc_max_rpcs)",
            "code",
        ),
        (
            "grpc_calls",
            "calls of the gRPC door in progress, streams included (an address holds at most "
            "grpc_max_rpcs_per_peer)",
        ),
        ("states_published_total", "device states published retained ([models.NAME.state])"),
        (
            "state_readings_replaced_total",
            "device readings replaced by a newer one of their key within every_s (not predicted)",
        ),
        (
            "state_readings_unread_total",
            "source messages not read into a state: not a valid reading (ingest dead-letters "
            "it) or a key unfit for a topic level",
        ),
        (
            "state_readings_failed_total",
            "readings taken for a state but not predicted: too few stored steps of a window, "
            "no weights yet, an error",
        ),
        ("state_echoes_total", "Home Assistant's echoes of our own states, ignored as readings"),
        ("states_evicted_total", "keys an actor stopped tracking to keep state.max_devices"),
        ("states_cleared_total", "retained states cleared: past the model's bound (its index)"),
        ("state_index_failures_total", "indexing calls of device states Redis refused"),
        ("state_devices", "keys with a state this actor tracks"),
        ("http_labels_joined_total", "labels of the HTTP labels route joined into a sample"),
        (
            "http_labels_duplicate_total",
            "labels of the HTTP labels route whose prediction was joined before",
        ),
        (
            "http_labels_unknown_total",
            "labels of the HTTP labels route whose prediction is not kept (expired, evicted, "
            "unknown, or asked by another caller)",
        ),
    ),
    Metric("actor", "request_latency_seconds", "histogram", "arrival at the actor to reply sent"),
    Metric("actor", "batch_size", "histogram", "rows per forward pass"),
]

# What a healthy value looks like, by full name: only what the code's behaviour says (a
# count that stays flat, a bound that holds); the metrics reference shows it beside the help.
_FLAT = "flat: a rise is a fault (Troubleshooting)"
_ZERO = "0"
HEALTHY = {
    "streamlearn_ingest_deadletters_total": "flat: a rise is a sender's bad payloads, its "
    "`reason` label says which (Troubleshooting)",
    "streamlearn_ingest_redis_errors_total": _FLAT,
    "streamlearn_ingest_back_pressure_pauses_total": "flat: each is a spell of the learner "
    "behind by `max_backlog_samples`",
    "streamlearn_ingest_qos0_dropped_total": _FLAT,
    "streamlearn_ingest_dedup_share_exceeded_total": _FLAT,
    "streamlearn_ingest_backlog_samples": "small and not growing; above `max_backlog_samples` "
    "ingest holds back",
    "streamlearn_ingest_holding": _ZERO,
    "streamlearn_ingest_inbox_messages": "well under `max_inbox_messages`",
    "streamlearn_learner_rollbacks_total": _FLAT,
    "streamlearn_learner_dead_lettered_samples_total": _FLAT,
    "streamlearn_learner_retraces_total": _ZERO,
    "streamlearn_learner_version": "rising while samples come",
    "streamlearn_learner_redis_oom": _ZERO,
    "streamlearn_learner_lease_lost_total": "flat: a rise is a learner that stopped renewing "
    "(paused, cut off from Redis) while another took over",
    "streamlearn_learner_promotions_fenced_total": "0: a rise is a learner that tried to "
    "promote its variant after it lost its lease",
    **{
        f"streamlearn_learner_{call}_failures_total": _FLAT
        for call in ("publish", "ack", "trim", "status", "read", "deadletter")
    },
    "streamlearn_learner_backlog_samples": "small and not growing",
    "streamlearn_learner_latest_version": "rising while samples come",
    "streamlearn_actor_error_replies_total": "flat: each is a request the service refused "
    "or could not answer",
    "streamlearn_actor_unsent_replies_total": _FLAT,
    "streamlearn_actor_expired_requests_total": _FLAT,
    "streamlearn_actor_shed_requests_total": _FLAT,
    "streamlearn_actor_failed_requests_total": _FLAT,
    "streamlearn_actor_keep_failures_total": _FLAT,
    "streamlearn_actor_refused_versions_total": _FLAT,
    "streamlearn_actor_weights_age_seconds": "under a second while samples come (a new "
    "version at least every `learner.publish.every_ms`); it grows while none come",
    "streamlearn_actor_queued_requests": "well under `max_queued_requests`",
    "streamlearn_actor_ready": "1 (at least one actor of each model: `NoReadyActors`)",
    "streamlearn_actor_broker_delay_seconds": "under 0.01 (about 0.001: a tuned broker; about "
    "0.04: Nagle's algorithm)",
    "streamlearn_actor_http_peer_refused_total": _FLAT,
}

METRICS: dict[str, Metric] = {
    m.full_name: replace(m, healthy=HEALTHY.get(m.full_name, ""))
    for m in (*_EVERY, *_INGEST, *_LEARNER, *_ACTOR)
}
