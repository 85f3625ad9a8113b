"""Policies: how each role treats its traffic, one frozen model per role.

`[learner]`, `[actor]` and `[models.NAME.promotion]` in `streamlearn.toml` (`[ingest]`:
`streamlearn.config.ingest`).
`streamlearn.config` composes them into a model's config (and re-exports them); a role
that needs only its own policy imports it from here.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from streamlearn.config import cpus
from streamlearn.config.moved import upgraded
from streamlearn.online import buckets

PREFETCH_MIN_CORES = 4  # the learner's reading thread is on by default from this many cores


def listen_address(value: str) -> str:
    """An IP address to bind, not a name: what a server listens on is then plain to see.

    >>> listen_address("[::1]"), listen_address("0.0.0.0")
    ('::1', '0.0.0.0')
    """
    try:
        return str(ipaddress.ip_address(value.strip("[]")))
    except ValueError:
        raise ValueError("must be an IP address to listen on (127.0.0.1, 0.0.0.0, ::)") from None


ListenAddress = Annotated[str, AfterValidator(listen_address)]


class Frozen(BaseModel):
    """Validated once, then immutable; an unknown field is an error, not ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class PublishPolicy(Frozen):
    """`[learner.publish]`: when the learner publishes its weights as a new version."""

    every_steps: int = Field(
        50, ge=1, description="under a backlog, publish weights after this many train steps"
    )
    every_ms: float = Field(250, gt=0, description="or after this many ms, whichever comes first")
    min_ms: float = Field(
        10,
        ge=0,
        description="caught up with the stream, the learner publishes what it learned at "
        "once, at most once per this many ms from one publish's start to the next's (under "
        "a backlog, every_* rule); raise it for a large model, whose every version is a "
        "blob written to Redis",
    )


class HistoryPolicy(Frozen):
    """`[learner.history]`: the versions Redis keeps, for the actors, `pin` and `export`."""

    newest: int = Field(5, ge=1, description="newest weights versions kept in Redis")
    versions: int = Field(
        60,
        ge=0,
        description="besides the newest, versions kept one per every_s for pin and "
        "export (default: an hour); each costs one blob of memory in Redis",
    )
    every_s: float = Field(60, gt=0, description="seconds between history versions")


class CheckpointPolicy(Frozen):
    """`[learner.checkpoint]`: the learner's checkpoints, when `dir` is set."""

    dir: str | None = Field(
        None,
        examples=["/var/lib/streamlearn/checkpoints"],
        description="checkpoints go to DIR/{model}/; unset: resume from published weights",
    )
    every_s: float = Field(10, gt=0, description="seconds between checkpoints")
    every_samples: int = Field(
        50_000,
        ge=1,
        description="or sooner, after this many samples: entries are acknowledged at each "
        "checkpoint, so keep it below ingest.max_backlog_samples",
    )


class LeasePolicy(Frozen):
    """`[learner.lease]`: one learner of a model (or variant) publishes at a time
    (`streamlearn.store.lease`); another waits and takes over when the lease lapses."""

    ttl_s: float = Field(10, gt=0, description="seconds a lease lasts unless renewed")
    renew_s: float = Field(
        2, gt=0, description="seconds between renewals (< ttl_s / 2), and a waiter's tries"
    )

    @model_validator(mode="after")
    def _check_renew(self) -> LeasePolicy:
        if self.renew_s >= self.ttl_s / 2:
            raise ValueError(
                f"renew_s must be < ttl_s / 2 ({self.ttl_s / 2:g}), got {self.renew_s:g}"
            )
        return self


class LearnerConfig(Frozen):
    """The learner's plumbing: micro-batching, publishing, the versions kept, checkpoints,
    its reports. How the model learns is `LearningConfig`'s."""

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, data: Any) -> Any:
        """`publish_min_ms` and the other keys now in a group: read until 0.3, warned."""
        if isinstance(data, dict):
            return upgraded({"learner": data}, "", groups_only=True)["learner"]
        return data

    max_batch: int = Field(256, ge=1, description="samples per train step, at most")
    max_wait_ms: float = Field(
        0,
        ge=0,
        description="wait for more samples once one arrived (each ms of it is a ms of "
        "staleness; batches grow by themselves under a backlog)",
    )
    buckets: tuple[int, ...] | None = Field(
        None, description="padded batch sizes; default: powers of 4 from 16 up to max_batch"
    )
    publish: PublishPolicy = Field(PublishPolicy(), description="when weights are published")
    history: HistoryPolicy = Field(HistoryPolicy(), description="which versions Redis keeps")
    status_every_ms: float = Field(
        1000,
        gt=0,
        le=2000,
        description="ms between the learner's retained status reports (with variants, "
        "its figures to the promoter too); at most 2000",
    )
    prefetch_batches: int | None = Field(
        None,
        ge=0,
        description="micro-batches read ahead by a background thread; 0: none (under a "
        "backlog the next read still goes out while a batch trains); unset: 2 with 4 usable "
        "CPUs or more (the affinity, within the cgroup's CPU quota), else 0 (on 2 cores the "
        "thread cost more than it saved)",
    )
    checkpoint: CheckpointPolicy = Field(
        CheckpointPolicy(), description="the learner's own checkpoints (off by default)"
    )
    lease: LeasePolicy = Field(
        LeasePolicy(), description="the lease that keeps a second learner from publishing"
    )
    tensorboard_dir: str | None = Field(
        None, description="write TensorBoard scalars to DIR/{model}/ at every status tick"
    )
    distribute: Literal["none", "mirrored", "multi_worker"] = Field(
        "none",
        description="mirrored: data-parallel over this host's devices (MirroredStrategy); "
        "multi_worker: one learner process per host, over TF_CONFIG (docs/scaling.md)",
    )
    devices: tuple[str, ...] = Field(
        (), description="devices to mirror over, e.g. ['/gpu:0', '/gpu:1']; default: all GPUs"
    )
    retry_max_ms: float = Field(
        5000,
        gt=0,
        description="longest wait before retrying a Redis call that failed (a publish, "
        "status report, read or acknowledgement refused while Redis is full or down)",
    )
    stale_group_s: float = Field(
        3600,
        gt=0,
        description="a variant's group whose consumers have all been idle this long no "
        "longer holds back the trimming of the stream",
    )
    max_stream_length: int = Field(
        1_000_000,
        ge=1,
        description="nor does a variant's group with more unread entries than this",
    )

    @model_validator(mode="after")
    def _check_buckets(self) -> LearnerConfig:
        if self.devices and self.distribute != "mirrored":
            raise ValueError(f"devices need distribute = 'mirrored', got {list(self.devices)}")
        if self.buckets is not None:
            if not self.buckets or any(b < 1 for b in self.buckets):
                raise ValueError(f"buckets must be positive sizes, got {list(self.buckets)}")
            if max(self.buckets) < self.max_batch:
                raise ValueError(
                    f"the largest bucket must be >= max_batch ({self.max_batch}), "
                    f"got {list(self.buckets)}"
                )
        return self

    def prefetch_depth(self) -> int:
        """`prefetch_batches`, or, unset, by the CPUs this process may use (its affinity and
        its cgroup's quota, `streamlearn.config.cpus`): a reading thread pays only with cores
        to spare besides the step's and Redis's (`bench.learner` measures it)."""
        if self.prefetch_batches is not None:
            return self.prefetch_batches
        return 2 if cpus.usable_cpus().usable >= PREFETCH_MIN_CORES else 0

    def bucket_sizes(self, replicas: int = 1) -> tuple[int, ...]:
        """The sorted padded sizes every train step uses (so it never retraces): powers of
        4 from 16 up to `max_batch` unless `buckets` are given (`streamlearn.online.buckets`)."""
        return buckets.ladder(self.max_batch, smallest=16, replicas=replicas, given=self.buckets)


class ActorConfig(Frozen):
    """Dynamic batching and reload policy of the actors."""

    replicas: int = Field(1, ge=1, description="actor processes `streamlearn up` starts")
    runtime: Literal["auto", "numpy", "tensorflow"] = Field(
        "auto",
        description="what computes the forward pass: numpy (no TensorFlow in the actor: a "
        "built-in architecture), tensorflow (any Keras model), or auto: numpy for a built-in "
        "architecture, tensorflow for a factory's model; the status says which and why",
    )
    max_batch: int = Field(64, ge=1, description="rows per forward pass, at most")
    max_wait_ms: float = Field(
        2, ge=0, description="wait for more, only while requests keep arriving as a batch is read"
    )
    reload_check_ms: float = Field(1000, gt=0, description="fallback poll for a new version")
    status_every_ms: float = Field(
        2000, gt=0, description="retained per-actor status (version, weights age) refresh"
    )
    broker_probe_every_s: float = Field(
        60,
        ge=0,
        description="how often the actor measures how long the broker holds the reply to a "
        "QoS 1 request (Nagle's algorithm: `set_tcp_nodelay`), with a second small "
        "connection; at start, then this often; 0: never",
    )
    max_request_rows: int = Field(
        1024, ge=1, description="rows in one request, at most; more get an error reply"
    )
    max_reply_bytes: int = Field(
        1_048_576,
        ge=1024,
        description="a reply's JSON, at most (and below the broker's maximum packet size); "
        "a larger one is replaced by an error reply",
    )
    max_queued_requests: int = Field(
        1000, ge=1, description="requests received and not yet served; more are shed (counted)"
    )
    max_queued_bytes: int = Field(
        64 * 1_048_576, ge=1, description="their payloads together, at most; more are shed"
    )
    request_deadline_ms: float = Field(
        5000,
        gt=0,
        description="a request that waited longer (or past its MQTT v5 Message Expiry "
        "Interval) is not computed: it gets a 'deadline exceeded' error reply",
    )
    drain_s: float = Field(
        15,
        gt=0,
        description="on SIGTERM, the actor answers what it took (queued, in progress on its "
        "doors) for at most this long; a pod's grace period must exceed it plus its preStop",
    )
    http_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        examples=[8080],
        description="serve the Open Inference Protocol (KServe V2 REST: /v2/models/NAME/infer) "
        "on this port, beside MQTT (0: any free port); unset: no HTTP",
    )
    http_host: ListenAddress = Field(
        "127.0.0.1",
        description="the address the HTTP door listens on: loopback unless a deployment asks "
        "for more (compose, Kubernetes: 0.0.0.0)",
    )
    http_max_connections: int = Field(
        256,
        ge=1,
        le=65536,
        description="open HTTP connections, at most; one more is answered 503 and closed "
        "unread. Each holds at most one request body (the door's body bound). With a "
        "token, those that showed it; up to 32 others wait for their first request",
    )
    http_max_connections_per_peer: int = Field(
        64,
        ge=1,
        le=65536,
        description="open HTTP connections of one IP address, at most (one more is answered "
        "503 and closed), and 8 of those without the token yet (its own oldest closed for a "
        "newer): one host cannot take the cap. Behind a proxy or an ingress, whose address "
        "every client then has, raise it to http_max_connections",
    )
    http_body_timeout_ms: float = Field(
        10_000,
        gt=0,
        description="a request body not received whole this long after its headers is "
        "refused (408) and its connection closed",
    )
    grpc_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        examples=[8001],
        description="serve the Open Inference Protocol over gRPC (KServe V2, Triton's "
        "inference.GRPCInferenceService) on this port, beside MQTT (0: any free port); "
        "unset: no gRPC",
    )
    grpc_host: ListenAddress = Field(
        "127.0.0.1",
        description="the address the gRPC door listens on: loopback unless a deployment asks "
        "for more (compose, Kubernetes: 0.0.0.0)",
    )
    grpc_max_connections: int = Field(
        256,
        ge=1,
        le=65536,
        description="open gRPC connections, at most: grpcio closes one more as it is "
        "accepted. Those without the token count too, until idle 15 s (grpcio cannot ask "
        "for it first)",
    )
    grpc_max_rpcs: int = Field(
        256,
        ge=1,
        le=65536,
        description="gRPC calls in progress, at most; one more is refused RESOURCE_EXHAUSTED",
    )
    grpc_max_rpcs_per_peer: int = Field(
        64,
        ge=1,
        le=65536,
        description="gRPC calls in progress of one IP address, at most (one more is refused "
        "UNAVAILABLE), and streams of one connection: one host cannot take grpc_max_rpcs. "
        "Behind a proxy, whose address every client then has, raise it to grpc_max_rpcs",
    )
    grpc_message_timeout_ms: float = Field(
        10_000,
        gt=0,
        description="a gRPC request message not received whole this long after its call "
        "began ends the call (DEADLINE_EXCEEDED)",
    )
    kept_versions: int = Field(
        4,
        ge=1,
        le=64,
        description="older versions an actor keeps loaded for requests that name one "
        "(least recently used first out); each holds a copy of the model",
    )


class PromotionConfig(Frozen):
    """`[models.NAME.promotion]`: when a variant replaces the champion.

    Each learner keeps the mean of its test-then-train loss and metric over its last
    `window_samples` samples; a variant whose figure beats the champion's by `margin`
    (relative) while both windows hold `min_samples` takes over.
    """

    on: Literal["loss", "metric"] = Field(
        "metric", description="metric: accuracy (higher is better) or MAE; loss: lower is better"
    )
    margin: float = Field(0.05, ge=0, lt=1, description="relative, 0.05: 5% better")
    window_samples: int = Field(5000, ge=1, description="samples the figures are a mean over")
    min_samples: int = Field(1000, ge=1, description="samples both windows need to compare")
    cooldown_s: float = Field(60, ge=0, description="no promotion this soon after the last one")

    @model_validator(mode="after")
    def _check_window(self) -> PromotionConfig:
        if self.min_samples > self.window_samples:
            raise ValueError(
                f"min_samples must be <= window_samples ({self.window_samples}), "
                f"got {self.min_samples}"
            )
        return self


def describe_error(exc: ValidationError, prefix: str = "", within: str = "") -> str:
    """One line naming each bad field: environment variables as `{prefix}NAME`, fields of a
    nested model as `{within}.field`."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if p not in ("function-after",))
        loc = f"{prefix}{loc.upper()}" if prefix else loc
        loc = ".".join(p for p in (within, loc) if p)
        msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        shown = "" if isinstance(value, dict) else f", got {value!r}"
        parts.append(f"{loc}: {msg}{shown}" if loc else f"{msg}{shown}")
    return "; ".join(parts)
