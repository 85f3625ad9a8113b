"""The model's named-field and source counts: one hash that every ingest process adds to
and the learner reads for its status (`Names.fields_key`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import redis

from streamlearn.contract.names import Names
from streamlearn.contract.records import FieldCounts


class FieldTotals:
    """The model's `fields` hash (`Names.fields_key`): the `FieldCounts` of named payloads
    acknowledged by every ingest process, summed, for the learner's status (`fields`).

    Hash fields `extra`, `unlabeled`, `missing:<input>` and `unseen:<input>`, the inputs
    being the model's configured ones only (what `NamedFields` counts, never a payload's
    own field names), and `source:<filter>`, the messages received on each of the model's
    `[[sources]]` filters: at most 2 + 2 x inputs + sources fields, however many messages
    or devices.
    """

    def __init__(self, client: redis.Redis, names: Names) -> None:
        self.redis = client
        self.key = names.fields_key

    def add(self, counts: FieldCounts, sources: Mapping[str, int] | None = None) -> None:
        """Add `counts` and the messages received per source filter in one round trip
        (HINCRBY each, pipelined); raises RedisError."""
        pipe = self.redis.pipeline(transaction=False)
        for name, n in (
            ("extra", counts.extra),
            ("unlabeled", counts.unlabeled),
            *((f"missing:{k}", v) for k, v in counts.missing.items()),
            *((f"unseen:{k}", v) for k, v in counts.unseen.items()),
            *((f"source:{k}", v) for k, v in (sources or {}).items()),
        ):
            if n:
                pipe.hincrby(self.key, name, n)
        if len(pipe):
            pipe.execute()

    def read(self) -> dict[str, Any] | None:
        """`{"extra", "unlabeled", "missing": {input: n}, "unseen": {input: n}}`, and
        `"sources": {filter: messages}` once a source's message was counted; None while
        nothing was (positional payloads on the samples topic never are)."""
        raw = cast(dict[bytes, bytes], self.redis.hgetall(self.key))
        if not raw:
            return None
        totals: dict[str, Any] = {"extra": 0, "unlabeled": 0, "missing": {}, "unseen": {}}
        for name, n in sorted(raw.items()):
            kind, _, input_name = name.decode().partition(":")
            if input_name and kind in ("missing", "unseen"):
                totals[kind][input_name] = int(n)
            elif not input_name and kind in ("extra", "unlabeled"):
                totals[kind] = int(n)
            elif kind == "source":
                totals.setdefault("sources", {})[input_name] = int(n)
        return totals
