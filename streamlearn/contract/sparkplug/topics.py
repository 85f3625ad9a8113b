"""Sparkplug B topics: `spBv1.0/{group}/{type}/{node}[/{device}]`, read into a `Topic`.

A Sparkplug id (group, edge node, device) is a non-empty UTF-8 string without `/`, `+`
or `#`; here also at most `MAX_ID_CHARS` characters and no control characters, as it
names keys in Redis (`streamlearn.store.sparkplug`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal, cast

NAMESPACE = "spBv1.0"
MAX_ID_CHARS = 128  # a group, node or device id; a device key is at most 3 x 128 + 2 chars
CACHED_TOPICS = 4096  # `read_topic`'s: a topic of a valid id is at most ~400 chars, ~2 MB
NODE_TYPES = ("NBIRTH", "NDATA", "NDEATH", "NCMD")
DEVICE_TYPES = ("DBIRTH", "DDATA", "DDEATH", "DCMD")
HOST_TYPES = ("NCMD", "DCMD", "STATE")  # a host's messages: nothing of a device's
MessageType = Literal[
    "NBIRTH", "NDATA", "NDEATH", "NCMD", "DBIRTH", "DDATA", "DDEATH", "DCMD", "STATE"
]
_BAD_ID = re.compile(r"[/+#\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Topic:
    """One Sparkplug topic: its message type, group and edge node, and device (None: a
    node's own message). A host's `STATE` topic has `node` the host id and `group` "".
    """

    type: MessageType
    group: str
    node: str
    device: str | None = None

    @property
    def node_key(self) -> str:
        """The edge node's key, `{group}/{node}`: what its seq, bdSeq and births belong to."""
        return f"{self.group}/{self.node}"

    @property
    def key(self) -> str:
        """The device key of the readings: `{group}/{node}`, or `{group}/{node}/{device}`.

        >>> parse_topic("spBv1.0/plant/DDATA/edge-1/press-2").key
        'plant/edge-1/press-2'
        """
        return self.node_key if self.device is None else f"{self.node_key}/{self.device}"


def parse_topic(topic: str) -> Topic:
    """The `Topic` of a Sparkplug B topic, else ValueError naming what is wrong.

    >>> parse_topic("spBv1.0/plant/NBIRTH/edge-1")
    Topic(type='NBIRTH', group='plant', node='edge-1', device=None)
    >>> parse_topic("spBv1.0/plant/DDATA/edge-1")
    Traceback (most recent call last):
    ...
    ValueError: DDATA names a device: spBv1.0/{group}/DDATA/{node}/{device}
    """
    levels = topic.split("/")
    if levels[0] != NAMESPACE:
        raise ValueError(f"not a Sparkplug B topic (it starts {levels[0][:20]!r}, not {NAMESPACE})")
    if len(levels) == 3 and levels[1] == "STATE":
        _check_id("host id", levels[2])
        return Topic("STATE", "", levels[2])
    if len(levels) not in (4, 5):
        raise ValueError(f"{len(levels)} levels: spBv1.0/{{group}}/{{type}}/{{node}}[/{{device}}]")
    _, group, kind, node, *device = levels
    if kind in NODE_TYPES:
        if device:
            raise ValueError(f"{kind} is a node's message: spBv1.0/{{group}}/{kind}/{{node}}")
    elif kind in DEVICE_TYPES:
        if not device:
            raise ValueError(f"{kind} names a device: spBv1.0/{{group}}/{kind}/{{node}}/{{device}}")
    else:
        raise ValueError(f"unknown message type {kind[:20]!r}")
    _check_id("group id", group)
    _check_id("edge node id", node)
    if device:
        _check_id("device id", device[0])
    return Topic(cast(MessageType, kind), group, node, device[0] if device else None)


def _check_id(what: str, value: str) -> None:
    if not value:
        raise ValueError(f"the {what} is empty")
    if len(value) > MAX_ID_CHARS:
        raise ValueError(f"the {what} has {len(value)} characters, more than {MAX_ID_CHARS}")
    if _BAD_ID.search(value):
        raise ValueError(f"the {what} holds '/', '+', '#' or a control character")


def topic_of(kind: MessageType, group: str, node: str, device: str | None = None) -> str:
    """The topic of a message of `kind` (a command's, to publish).

    >>> topic_of("NCMD", "plant", "edge-1")
    'spBv1.0/plant/NCMD/edge-1'
    """
    tail = "" if device is None else f"/{device}"
    return f"{NAMESPACE}/{group}/{kind}/{node}{tail}"


def state_topic(host_id: str) -> str:
    """A host application's STATE topic (Sparkplug 3.0), retained.

    >>> state_topic("streamlearn")
    'spBv1.0/STATE/streamlearn'
    """
    _check_id("host id", host_id)
    return f"{NAMESPACE}/STATE/{host_id}"


@functools.lru_cache(maxsize=CACHED_TOPICS)
def read_topic(topic: str) -> Topic:
    """`parse_topic`, remembered for the last `CACHED_TOPICS` valid topics (a fleet
    publishes on the same ones again and again; one that fails is not kept)."""
    return parse_topic(topic)
