"""Labels that come later: `{"id", "y"}` or `{"labels": [{"id", "y"}, ...]}`, each joined
by its typed id to the prediction an actor kept for its requester (`streamlearn.store.pending`)
into a training sample. Two doors take them: ingest, from `{prefix}/{model}/labels/{client}`
(the predictions asked on `predict/{client}`; the broker's ACL binds `{client}` to the
sender) and bare `labels` (bare `predict`'s); and the actors' HTTP door
(`streamlearn.actor.labels`), for the predictions asked over HTTP in the caller's owner
namespace (`names.http_owner`). A label joins only its own namespace's predictions.

A joined label becomes a sample (the kept features, the label, a de-duplication id in a
space no device's sample id can take, `names.label_id`) that takes the samples' own
exactly-once append (`streamlearn.store.appends`): a repeated label is a de-duplicated
duplicate, whichever door it came through. Once Redis holds it, the prediction is
tombstoned and scored (`PendingStore.join`), once, and only then is the label message
acknowledged (the HTTP request answered). Labels of a run of messages are read back in one
round trip. A label for an id never kept (or expired) is `unknown_id` (a dead letter on
MQTT); one without an id or with a target the task refuses is a dead letter of its kind,
and the good labels of the same message still join (over HTTP: a 400, none joined).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from streamlearn.contract.names import label_id, owned
from streamlearn.contract.payloads import PayloadParser
from streamlearn.contract.records import Kind, Parsed, Rejection, Samples
from streamlearn.contract.schemas import decode as decode_json
from streamlearn.errors import PayloadError
from streamlearn.store.pending import Joined, Kept, PendingStore, decode

# reasons of rejected labels one dead letter lists
LISTED_REASONS = 5


@dataclass
class LabelMessage:
    """A label message as parsed: its good labels (id, y), its rejections and its sender's
    level (None: bare `labels`)."""

    labels: list[tuple[str | int, float]]
    rejections: list[Rejection]
    sender: str | None = None
    joined: list[Joined] = field(default_factory=list)
    unknown: int = 0
    # each good label's result once joined: `joined`, `unknown_id` or `duplicate`
    results: list[str] = field(default_factory=list)


class LabelJoiner:
    """Parses label messages and joins them to kept predictions."""

    def __init__(self, parser: PayloadParser, pending: PendingStore) -> None:
        self.parser = parser
        self.model = parser.model
        self.pending = pending
        self._width = int(np.prod(self.model.sample_shape))
        self._targets = parser.check_targets  # for the task (bad_target)
        self.duplicates = 0  # labels of predictions already joined (counted, not stored)
        self.unknown = 0
        self.joined = 0

    def parse(self, raw: bytes, sender: str | None = None) -> LabelMessage:
        """The labels of one message from `sender`'s topic; whatever is wrong with it is a
        rejection, never raised."""
        try:
            doc = decode_json(raw, self.model.ingest.max_payload_bytes)
            items = [doc] if "labels" not in doc else _items(doc)
            limit = self.model.ingest.max_samples_per_message
            if len(items) > limit:
                raise PayloadError(
                    f"{len(items)} labels exceed max_samples_per_message={limit}",
                    "too_many_samples",
                )
        except PayloadError as exc:
            return LabelMessage([], [Rejection(str(exc), raw, cast(Kind, exc.kind))], sender)
        good: list[tuple[str | int, float]] = []
        bad: list[tuple[int, PayloadError]] = []
        rejected = 0
        at: list[int] = []  # each good label's index in the message
        for i, item in enumerate(items):
            try:
                good.append(self._label(item))
                at.append(i)
            except PayloadError as exc:
                rejected += 1
                if len(bad) < LISTED_REASONS:
                    bad.append((i, exc))
        try:  # the task's targets, all at once; one by one only to find which are bad
            self._targets([y for _, y in good])
        except PayloadError:
            kept = []
            for i, (rid, y) in zip(at, good, strict=True):
                try:
                    self._targets([y])
                    kept.append((rid, y))
                except PayloadError as exc:
                    rejected += 1
                    if len(bad) < LISTED_REASONS:
                        bad.append((i, exc))
            good = kept
            bad.sort(key=lambda b: b[0])
        if not rejected:
            return LabelMessage(good, [], sender)
        where = "labels." if "labels" in doc else ""
        listed = "; ".join(f"{where}{i}: {exc}".removeprefix("0: ") for i, exc in bad)
        more = f"and {rejected - len(bad)} more; " if rejected > len(bad) else ""
        reason = f"{listed} ({more}{rejected} of {len(items)} labels rejected)"
        return LabelMessage(good, [Rejection(reason, raw, cast(Kind, bad[0][1].kind))], sender)

    def _label(self, item: Any) -> tuple[str | int, float]:
        if not isinstance(item, dict):
            raise PayloadError("a label must be an object {id, y}", "wrong_type")
        extra = sorted(set(item) - {"id", "y"})
        if extra:
            raise PayloadError(f"unknown fields {extra[:4]}", "unknown_field")
        if "id" not in item or "y" not in item:
            missing = "id" if "id" not in item else "y"
            raise PayloadError(f"{missing}: field required", "missing_field")
        rid, y = item["id"], item["y"]
        if isinstance(rid, bool) or not isinstance(rid, str | int):
            raise PayloadError(f"id must be a string or an integer, got {rid!r:.40}", "wrong_type")
        if isinstance(rid, str) and not 1 <= len(rid) <= 256:
            raise PayloadError("id must have 1 to 256 characters", "bad_string")
        if isinstance(y, bool) or not isinstance(y, int | float):
            raise PayloadError(f"y must be a number, got {y!r:.40}", "wrong_type")
        try:
            y = float(y)
        except OverflowError:
            y = math.inf
        if not math.isfinite(y):
            raise PayloadError("y must be finite", "non_finite")
        return rid, y

    def join(self, messages: list[LabelMessage], raws: list[bytes]) -> list[Parsed]:
        """Each label message as a parsed samples message: its labels joined to the
        predictions kept for its sender (read in one round trip; a RedisError is the
        caller's to retry)."""
        keys = [[owned(m.sender, rid) for rid, _ in m.labels] for m in messages]
        ids = list(dict.fromkeys(k for ks in keys for k in ks))
        values = dict(zip(ids, self.pending.fetch(ids), strict=True))
        now = time.time()
        taken: set[str] = set()  # joined by an earlier label of this run
        out = []
        for m, raw, ks in zip(messages, raws, keys, strict=True):
            found: list[Kept] = []
            ys, requests, unknown = [], [], []
            m.results = []
            for (rid, y), key in zip(m.labels, ks, strict=True):
                value = values[key]
                kept = decode(value)
                if (kept is None and value is None) or (kept and not self._fits(kept)):
                    unknown.append(rid)  # never kept, expired, or kept for another shape
                    m.results.append("unknown_id")
                    continue
                if kept is None or key in taken:  # joined before: a duplicate
                    self.duplicates += 1
                    m.results.append("duplicate")
                    continue
                m.results.append("joined")
                taken.add(key)
                found.append(kept)
                ys.append(y)
                requests.append(key)
            rejections = list(m.rejections)
            m.unknown = len(unknown)
            if unknown:
                listed = ", ".join(repr(u)[:60] for u in unknown[:LISTED_REASONS])
                more = f" and {len(unknown) - LISTED_REASONS} more" if len(unknown) > 5 else ""
                whose = "bare predict" if m.sender is None else f"predict/{m.sender}"
                reason = (
                    f"no prediction kept for id {listed}{more} asked on {whose} "
                    "(never served, expired, or another client's)"
                )
                rejections.append(Rejection(reason, raw, "unknown_id"))
            m.joined = []
            samples = None
            if found:
                targets = np.asarray(ys, np.float32)
                x = np.stack([k.x for k in found]).reshape((len(found), *self.model.sample_shape))
                samples = Samples(x, targets, tuple(label_id(k) for k in requests))
                predictions = np.stack([k.y for k in found])
                loss, metric = score(self.model.task, predictions, np.asarray(ys, np.float64))
                delay = np.maximum(0.0, now - np.array([k.served_at for k in found]))
                m.joined = [
                    Joined(*j)
                    for j in zip(
                        requests, loss.tolist(), metric.tolist(), delay.tolist(), strict=True
                    )
                ]
            out.append(Parsed(samples, None, rejections))
        return out

    def _fits(self, kept: Kept) -> bool:
        """Whether a kept prediction fits this model (it may predate a config change)."""
        outputs = self.model.classes if self.model.task == "multiclass" else 1
        return kept.x.size == self._width and kept.y.size == outputs

    def settle(self, messages: list[LabelMessage]) -> int:
        """Tombstone and score what `messages` joined (Redis holds their samples); returns
        how many were scored (not joined before)."""
        joined = [j for m in messages for j in m.joined]
        unknown = sum(m.unknown for m in messages)
        scored = self.pending.join(joined, unknown)
        self.joined += len(joined)
        self.unknown += unknown
        return scored


def score(task: str, predictions: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Loss and metric of served predictions (n, outputs) against their labels (n,): log
    loss and accuracy at 0.5 (binary), cross-entropy and argmax accuracy (multiclass),
    squared and absolute error (regression). Probabilities are clipped to [1e-7, 1 - 1e-7]
    as Keras does.

    >>> loss, metric = score("regression", np.array([[2.0]]), np.array([0.5]))
    >>> loss.tolist(), metric.tolist()
    ([2.25], [1.5])
    >>> score("binary", np.array([[0.8], [0.3]]), np.array([1.0, 1.0]))[1].tolist()
    [1.0, 0.0]
    """
    eps = 1e-7
    p = predictions.astype(np.float64)
    if task == "binary":
        q = np.clip(p[:, 0], eps, 1 - eps)
        loss = -(y * np.log(q) + (1 - y) * np.log(1 - q))
        return loss, ((p[:, 0] > 0.5) == (y > 0.5)).astype(np.float64)
    if task == "multiclass":
        c = y.astype(np.int64)
        picked = p[np.arange(len(c)), c]
        loss = -np.log(np.clip(picked, eps, 1 - eps))
        return loss, (np.argmax(p, axis=1) == c).astype(np.float64)
    err = p[:, 0] - y
    return err * err, np.abs(err)


def _items(doc: dict[str, Any]) -> list[Any]:
    extra = sorted(set(doc) - {"labels"})
    if extra:
        raise PayloadError(f"unknown fields {extra[:4]}", "unknown_field")
    items = doc["labels"]
    if not isinstance(items, list) or not items:
        raise PayloadError("labels must be a non-empty list of {id, y}", "wrong_type")
    return items
