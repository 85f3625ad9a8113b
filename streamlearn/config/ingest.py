"""`[ingest]` and `[models.NAME.ingest]`: how MQTT messages become stream entries, and the
bounds of what one message, one sender and one model may hold (`streamlearn.config`
composes it into a model's config and re-exports it)."""

from __future__ import annotations

from pydantic import Field, model_validator

from streamlearn.config.policies import Frozen


class IngestConfig(Frozen):
    """How MQTT messages become stream entries."""

    replicas: int = Field(1, ge=1, description="ingest processes `streamlearn up` starts")
    partitions: int = Field(
        1,
        ge=1,
        le=64,
        description="streams the model's samples are spread over, each in a Redis slot of its "
        "own (by sample id; keyed observations by key); dedup ids, devices and the backlog "
        "limits hold per partition",
    )
    max_payload_bytes: int = Field(1_048_576, ge=64, description="larger payloads are rejected")
    max_samples_per_message: int = Field(
        10_000, ge=1, description="samples in one message, at most; a larger one is a dead letter"
    )
    deadletter_maxlen: int = Field(10_000, ge=1, description="dead-letter stream cap (entries)")
    deadletter_payload_bytes: int = Field(1024, ge=0, description="payload kept per dead letter")
    max_pending_messages: int = Field(
        1000, ge=1, description="messages received but not yet in Redis (MQTT receive maximum)"
    )
    dedup_window_s: int = Field(
        300,
        ge=0,
        description="a sample id seen again within this many seconds is dropped (0: off); "
        "Redis keeps a key of ~100 bytes per id for this long",
    )
    max_backlog_samples: int = Field(
        100_000,
        ge=1,
        description="above this many samples not yet acknowledged by the learner, ingest "
        "stops acknowledging (the broker holds the messages) until it drains",
    )
    window_ttl_s: int = Field(
        86_400,
        ge=1,
        description="a device's stored observations (keyed samples) expire after this many "
        "seconds without a new one",
    )
    max_dedup_ids: int = Field(
        1_000_000,
        ge=2,
        description="sample ids remembered for de-duplication, at most (~100 bytes of Redis "
        "each): beyond it the oldest are forgotten before dedup_window_s",
    )
    dedup_sender_share: float = Field(
        0.05,
        gt=0,
        le=1,
        description="the part of max_dedup_ids one client's ids (samples/{client}, "
        "labels/{client}) may take: past it, its further ids are appended and not "
        "remembered (its own redeliveries may then repeat), never another's forgotten. "
        "Bare samples share the whole",
    )
    max_keys_per_message: int = Field(
        1000,
        ge=1,
        description="distinct device keys in one message; observations of further keys are "
        "rejected (dead-lettered with the message)",
    )
    max_devices: int = Field(
        10_000,
        ge=1,
        description="devices (keys) whose windows are kept; past it a sender's new one "
        "evicts its own idlest while it holds others, its first the idlest of all",
    )
    max_keys_per_sender: int = Field(
        1000,
        ge=1,
        description="window keys one sender (the topic a message came on) may create; "
        "observations of further new keys from it are dead-lettered (too_many_keys), so one "
        "sender's flood cannot evict others' windows",
    )
    window_max_seq_jump: float = Field(
        1e10,
        gt=0,
        le=2.0**54,
        description="how far a keyed observation's seq may run ahead of its key's newest, in "
        "the seq's own unit; further is a dead letter (out_of_range). 1e10: a gap of 10,000 s "
        "in microsecond timestamps, 115 days in milliseconds",
    )
    max_inbox_messages: int = Field(
        10_000,
        ge=1,
        description="messages received and not yet processed; beyond it (or max_inbox_bytes) "
        "QoS 0 messages are dropped and counted (QoS 1 ones are held at the broker)",
    )
    max_inbox_bytes: int = Field(
        64 * 1_048_576,
        ge=1,
        description="their payloads together, at most: beyond it QoS 0 messages are dropped "
        "and QoS 1 ones wait at the broker (unacknowledged) until the inbox drains",
    )

    @model_validator(mode="after")
    def _check_keys(self) -> IngestConfig:
        if self.max_keys_per_message > self.max_devices:
            raise ValueError(
                f"max_keys_per_message must be <= max_devices ({self.max_devices}), "
                f"got {self.max_keys_per_message}"
            )
        return self
