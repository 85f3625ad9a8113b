"""The model's named-field counts: one hash that every ingest process adds to and the
learner reads for its status (`Names.fields_key`)."""

from __future__ import annotations

from typing import Any, cast

import redis

from streamlearn.contract.names import Names
from streamlearn.contract.records import FieldCounts


class FieldTotals:
    """The model's `fields` hash (`Names.fields_key`): the `FieldCounts` of named payloads
    acknowledged by every ingest process, summed, for the learner's status (`fields`).

    Hash fields `extra`, `unlabeled`, `missing:<input>` and `unseen:<input>`, the inputs
    being the model's configured ones only (what `NamedFields` counts, never a payload's
    own field names): at most 2 + 2 x inputs fields, however many messages or devices.
    """

    def __init__(self, client: redis.Redis, names: Names) -> None:
        self.redis = client
        self.key = names.fields_key

    def add(self, counts: FieldCounts) -> None:
        """Add `counts` in one round trip (HINCRBY each, pipelined); raises RedisError."""
        pipe = self.redis.pipeline(transaction=False)
        for name, n in (
            ("extra", counts.extra),
            ("unlabeled", counts.unlabeled),
            *((f"missing:{k}", v) for k, v in counts.missing.items()),
            *((f"unseen:{k}", v) for k, v in counts.unseen.items()),
        ):
            if n:
                pipe.hincrby(self.key, name, n)
        if len(pipe):
            pipe.execute()

    def read(self) -> dict[str, Any] | None:
        """`{"extra", "unlabeled", "missing": {input: n}, "unseen": {input: n}}`; None
        while nothing was counted (positional payloads never are)."""
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
        return totals
