"""Sparkplug B in (Eclipse Tahu's protobuf payloads on `spBv1.0/...` topics): topics read
into records, payloads into metrics, and the messages a host application publishes (a
rebirth request, its STATE). `proto/` holds Tahu's `.proto` and what protoc made of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.contract.sparkplug.payloads import (
        Decoded,
        Metric,
        decode,
        rebirth_request,
        state_payload,
    )
    from streamlearn.contract.sparkplug.topics import Topic, parse_topic, state_topic, topic_of


__all__, __getattr__ = exports(
    __name__,
    {
        "Decoded": "payloads",
        "Metric": "payloads",
        "decode": "payloads",
        "rebirth_request": "payloads",
        "state_payload": "payloads",
        "Topic": "topics",
        "parse_topic": "topics",
        "state_topic": "topics",
        "topic_of": "topics",
    },
)
