"""`[models.NAME.sparkplug]`: Sparkplug B edge nodes as a model's source.

Ingest keeps each edge node's session in Redis (`streamlearn.store.sparkplug`): its
aliases from its births, its newest seq and bdSeq, which of it is alive. These bound it;
`primary_host` makes ingest a Sparkplug 3.0 primary host (`streamlearn.ingest.host`).
The table applies to a model's sources of `format = "sparkplug_b"`; without one it is
ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from streamlearn.config.policies import Frozen

if TYPE_CHECKING:
    from streamlearn.config.assembly import AssemblyConfig
    from streamlearn.config.inputs import SourceConfig

# Redis memory, in bytes: a node's hash, its seq times (256 at most) and its device hash;
# an alias of a metric the model does not read (its datatype alone), and of one it reads
# (its name too: at most 256 characters, 40 typical).
NODE_BYTES = 8_000
ALIAS_BYTES = 24
NAMED_ALIAS_BYTES = 80


class SparkplugConfig(Frozen):
    """How many edge nodes, devices and aliases are kept, and when to ask a rebirth.

    A node takes at most `NODE_BYTES` + `max_aliases_per_node` x `ALIAS_BYTES` bytes of
    Redis, plus 56 B more per alias of a metric the model reads (at most inputs + 1 per
    node and per device): 248 KB with the defaults, 248 MB for `max_nodes` of them.
    """

    max_nodes: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description="edge nodes kept, at most; past it a new node forgets the idlest never "
        "born (data before any birth: a flood of made-up nodes), else the idlest of all",
    )
    max_devices_per_node: int = Field(
        1000,
        ge=1,
        le=100_000,
        description="devices kept per edge node; a birth of one more is refused (counted), "
        "its data asks no rebirth",
    )
    max_aliases_per_node: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="aliases kept per edge node, its own and its devices' together; a birth "
        "past it is refused (counted), its data asks no rebirth",
    )
    ttl_s: int = Field(
        86_400,
        ge=60,
        le=30 * 86_400,
        description="a node (its aliases, seq, devices) is forgotten after this many seconds "
        "without a message; its next data asks a rebirth",
    )
    rebirth_min_interval_s: float = Field(
        10.0,
        ge=0.1,
        le=3600,
        description="at most one rebirth request (NCMD `Node Control/Rebirth`) per edge node "
        "in this many seconds, shared by every ingest process",
    )
    reorder_timeout_s: float = Field(
        2.0,
        ge=0,
        le=60,
        description="a skipped seq counts as lost (a rebirth asked) only once it has not "
        "come for this many seconds: ingest processes of a shared subscription take one "
        "node's messages out of order",
    )
    primary_host: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        pattern=r"^[^/+#\x00-\x1f\x7f]+$",
        examples=["streamlearn"],
        description="a Sparkplug host id: ingest publishes the retained STATE "
        "spBv1.0/STATE/{id} (online while any ingest process lives), for edge nodes that "
        "wait for their primary host; unset: none",
    )


def check_sources(
    sources: Sequence[SourceConfig], assembly: AssemblyConfig | None, fields: object
) -> None:
    """A Sparkplug source's metrics are named readings that assembly holds: data carries
    only the metrics that changed, the held values are the unchanged others."""
    if not any(s.format == "sparkplug_b" for s in sources):
        return
    if fields is None:
        raise ValueError('sources.format: "sparkplug_b" reads metrics by name (inputs = [names])')
    if assembly is None:
        raise ValueError(
            'sources.format: "sparkplug_b" needs [models.NAME.assembly] (its held values are '
            "the metrics a message leaves unchanged)"
        )
