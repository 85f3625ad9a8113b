"""The HTTP door's labels (`POST /v2/models/{model}/labels`), joined in the actor through
ingest's own join and exactly-once append (`streamlearn.store.labels`).

A body is the MQTT labels payload, `{"id", "y"}` or `{"labels": [{"id", "y"}, ...]}` (at
most `max_samples_per_message`), read by the same parser. Its labels join only the
predictions its caller asked for over HTTP, in its owner namespace (`names.http_owner`):
each becomes a sample whose de-duplication id is its kept prediction's (`names.label_id`),
appended to its partition in the one script call that checks and records that id, then the
prediction is tombstoned and scored (`PendingStore.join`). So a label posted twice, or by
two callers at once, is learned once, as on MQTT. A body with an invalid label is refused
whole (400) and joins nothing; an unknown id is answered as such and counted in the served
score's `unknown`, not dead-lettered: its caller is told.

The door joins itself rather than handing labels to ingest over MQTT: the answer can then
say what became of each label, and no topic has to carry a namespace that only actors may
name. The price is the actor's Redis account: the join's keys (`deploy/redis/make-acl.sh`).

Back-pressure as ingest's: while the learner is more than `ingest.max_backlog_samples`
behind (measured at most every `BACKLOG_EVERY_S`), labels are refused (503). A call that
fails part way stored nothing twice: its caller posts it again.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from streamlearn.config.app import ModelConfig
from streamlearn.contract.names import Names
from streamlearn.contract.payloads import PayloadParser
from streamlearn.errors import PayloadError
from streamlearn.store.labels import LabelJoiner
from streamlearn.store.partitions import split
from streamlearn.store.pending import PendingStore
from streamlearn.store.stream import SampleStream

BACKLOG_EVERY_S = 0.2  # the backlog is measured at most this often (ingest's `poll_s`)


class DoorLabels:
    """Joins the labels of HTTP bodies to the predictions their callers were served."""

    def __init__(self, cfg: ModelConfig, client: redis.Redis, names: Names) -> None:
        self.cfg = cfg
        self.joiner = LabelJoiner(PayloadParser(cfg), PendingStore(client, names, cfg.labels))
        parts = range(cfg.ingest.partitions)
        self.parts = [SampleStream.of(client, names.of_partition(i), cfg) for i in parts]
        self.backlog = 0  # unacknowledged samples, as last measured
        self._measured_at = -float("inf")
        self._joining = threading.Lock()  # one body at a time: its counts and the backlog's

    def held_back(self) -> str | None:
        """Why labels wait now (the learner too far behind), or None."""
        now = time.monotonic()
        if now - self._measured_at >= BACKLOG_EVERY_S:
            self.backlog = sum(part.backlog() for part in self.parts)
            self._measured_at = now
        limit = self.cfg.ingest.max_backlog_samples
        if self.backlog <= limit:
            return None
        return (
            f"back-pressure: {self.backlog} samples unprocessed > max_backlog_samples={limit}; "
            "retry later"
        )

    def take(self, body: bytes, owner: str) -> dict[str, Any]:
        """Join `body`'s labels to `owner`'s kept predictions; the answer's document, each
        label's result in order (`joined`, `duplicate`, `unknown_id`) and their counts.
        PayloadError (400) for a body with an invalid label: nothing joined. A RedisError
        is the caller's (503): what it stored, a second call stores not again."""
        message = self.joiner.parse(body, owner)
        if message.rejections:
            first = message.rejections[0]
            raise PayloadError(f"{first.reason}; no label joined", first.kind)
        with self._joining:
            (parsed,) = self.joiner.join([message], [body])
            if parsed.samples is not None:
                ingest = self.cfg.ingest
                for i, part in split(parsed, body, len(self.parts)):  # its samples only
                    if part.samples is not None:
                        self.parts[i].write(
                            [part.samples],
                            dedup_window_s=ingest.dedup_window_s,
                            max_dedup_ids=ingest.max_dedup_ids,
                            dedup_share=ingest.dedup_sender_share,
                        )
            self.joiner.settle([message])
        results = message.results
        return {
            "model_name": self.cfg.name,
            **{r: results.count(r) for r in ("joined", "duplicate", "unknown_id")},
            "results": results,
        }

    def metrics(self) -> dict[str, int]:
        """For the actor's /metrics (`streamlearn.observe.catalog`)."""
        return {
            "http_labels_joined_total": self.joiner.joined,
            "http_labels_duplicate_total": self.joiner.duplicates,
            "http_labels_unknown_total": self.joiner.unknown,
        }
