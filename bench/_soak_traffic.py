"""The soak's traffic: valid senders, the hostile sender, and what is read back.

`Traffic` sends the valid samples (each id in its ledger) and requests on a schedule, and
the floods; `HostileSender` the catalogue of `bench.hostile`; `Watcher` sees every reply
under the prefix, by Correlation Data and topic; `Audit` reads every stream entry (through
a consumer group of its own) and every dead letter; `scrape` and `rss_kib` read the
workers' metrics and memory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import struct
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from itertools import zip_longest
from pathlib import Path

import redis

from bench._stack import Stack
from bench.hostile import (
    REQUEST_KINDS,
    SAMPLE_KINDS,
    Kind,
    Sent,
    Shape,
    marker,
    publish_packet,
    request_topics,
)
from bench.loadgen import LoadClient
from streamlearn.config import ModelConfig
from streamlearn.contract.names import Names
from streamlearn.stack.demo import DemoStream
from streamlearn.store.stream import SampleStream

AUDIT_GROUP = "soak-audit"
VALID, FLOOD = "soak-v", "soak-f"  # the {client} of valid requests and of request floods
DEVICE = "soak-dev"  # sends keyed observations; a third of the valid requests are key-only


def _verdict(payload: bytes) -> tuple[str, str]:
    """A reply's kind, "error" (with the error) or "y"; "other" for anything else (such as
    a request)."""
    try:
        doc = json.loads(payload)
    except (ValueError, RecursionError):  # what a hostile request holds
        return "other", ""
    if not isinstance(doc, dict) or "model" not in doc:  # every reply names its model
        return "other", ""
    if "error" in doc:
        return "error", str(doc["error"])
    return ("y" if "y" in doc else "other"), ""


class Watcher(LoadClient):
    """Every reply under `reply_topic` (a wildcard), by its Correlation Data, with its topic.

    Requests are seen too (on the predict topics): those are left out, while a reply that
    a hostile request sent to a predict topic is kept, as the leak it is.
    """

    def __post_init__(self) -> None:
        self.seen: dict[bytes, list[tuple[str, str, str]]] = defaultdict(list)
        self.predict = "/predict"
        self.unreadable = 0
        super().__post_init__()

    def _on_publish(self, first: int, body: bytes, now: float) -> None:
        try:
            (n,) = struct.unpack_from("!H", body)
            topic = body[2 : 2 + n].decode("utf-8", "replace")
            super()._on_publish(first, body, now)
        except (ValueError, IndexError, struct.error):
            self.unreadable += 1
            return
        reply = self.replies.pop()
        if not reply.correlation:
            return
        verdict, error = _verdict(reply.payload)
        if verdict == "other" and self.predict in topic:
            return
        self.seen[reply.correlation].append((topic, verdict, error[:200]))


class HostileSender(threading.Thread):
    """Sends the catalogue round-robin at `rate` messages/s until `stop` is set."""

    CLIENT = "soak-h"  # its {client} in `predict/{client}` and `replies/{client}/`

    def __init__(
        self, host: str, port: int, names: Names, shape: Shape, rate: float, stop: threading.Event
    ) -> None:
        super().__init__(daemon=True)
        self.host, self.port, self.names, self.shape = host, port, names, shape
        self.rate, self.stop = rate, stop
        self.kinds = [k for pair in zip_longest(SAMPLE_KINDS, REQUEST_KINDS) for k in pair if k]
        self.sent: list[Sent] = []
        self.valid_ids: set[str] = set()  # valid samples inside hostile lists
        self.reconnects = 0
        self._client = self._connect()
        self._pid = 0

    def _connect(self) -> LoadClient:
        return LoadClient(self.host, self.port, f"{self.names.topic('replies')}/{self.CLIENT}/x")

    def run(self) -> None:
        start, i = time.monotonic(), 0
        while not self.stop.wait(max(0.0, start + i / self.rate - time.monotonic())):
            self.send_one(i + 1, self.kinds[i % len(self.kinds)])
            i += 1

    def send_one(self, n: int, kind: Kind) -> None:
        probe = kind.make(marker(n), self.shape)
        self._pid = self._pid % 65535 + 1
        if kind.topic == "samples":
            self.valid_ids.update(probe.valid_ids)
            packet = publish_packet(
                self.names.samples_topic, probe.payload, qos=1, packet_id=self._pid
            )
        else:
            topic, response, payload = request_topics(self.names, self.CLIENT, probe)
            packet = publish_packet(
                topic,
                payload,
                qos=1,
                packet_id=self._pid,
                response_topic=response,
                correlation=b"h%d" % n,
            )
        if kind.expect == "broker":  # on a connection of its own: the broker closes it
            client = self._connect()
            with contextlib.suppress(OSError):
                client.send(packet)
            client._reader.join(3)
            self.sent.append(Sent(n, kind, probe.bare, not client._reader.is_alive()))
            client.close()
            return
        for _ in range(2):  # the broker closed the connection: once more on a new one
            try:
                self._client.send(packet)
                self.sent.append(Sent(n, kind, probe.bare, at=time.monotonic()))
                return
            except OSError:
                self.reconnects += 1
                self._client.close()
                self._client = self._connect()

    def close(self) -> None:
        self._client.close()


class Audit(threading.Thread):
    """Reads every stream entry (its own consumer group) and every dead letter as they come.

    The group holds back the stream's trimming until it has acknowledged an entry, so none
    is trimmed unread; dead letters are read often enough that the stream's cap loses none.
    """

    def __init__(
        self, r: redis.Redis, names: Names, sample_shape: tuple[int, ...], stop: threading.Event
    ) -> None:
        super().__init__(daemon=True)
        self.r, self.names, self.stop = r, names, stop
        self.stream = SampleStream(r, names, sample_shape, group=AUDIT_GROUP)
        self.ids: Counter[str] = Counter()
        self.samples = 0  # samples in the entries read
        self.deadletters: list[tuple[str, str, bytes, int]] = []  # source, reason, head, size
        self.errors = 0
        self._last_dead = "0-0"

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.poll()
            except redis.RedisError:
                self.errors += 1
                self.stop.wait(0.5)

    def poll(self, block_ms: int = 200) -> None:
        entries = self.stream.read("audit", 100, block_ms)
        for entry in entries:
            self.samples += len(entry.samples)
            self.ids.update(i for i in entry.samples.ids or () if i is not None)
        if entries:
            self.stream.ack([e.id for e in entries])
        dead = self.r.xrange(self.names.deadletter_key, f"({self._last_dead}", "+", count=20000)
        for eid, f in dead:
            self._last_dead = eid.decode()
            head = f.get(b"payload", b"")
            self.deadletters.append(
                (f[b"source"].decode(), f[b"reason"].decode(), head, int(f[b"size"]))
            )


def rss_kib(pid: int) -> int | None:
    """VmRSS of a live process, KiB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def scrape(port: int) -> dict[str, float]:
    """A worker's /metrics, summed over labels (dead letters also by reason)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:
        return {}
    out: dict[str, float] = defaultdict(float)
    for line in text.decode().splitlines():
        if line.startswith("streamlearn_"):
            name, _, value = line.rpartition(" ")
            out[name.split("{")[0]] += float(value)
            if "reason=" in name:
                out[name] += float(value)
    return dict(out)


class Traffic:
    """The soak's senders: valid samples and requests on a schedule, floods, hostile inputs."""

    def __init__(self, stack: Stack, names: Names, cfg: ModelConfig, args: argparse.Namespace):
        self.names, self.cfg, self.args = names, cfg, args
        self.demo = DemoStream(cfg, seed=7)
        replies = names.topic("replies")
        self.samples = stack.client()
        self.requests = LoadClient(stack.host, stack.mqtt_port, f"{replies}/{VALID}/r")
        self.flooder = LoadClient(stack.host, stack.mqtt_port, f"{replies}/{FLOOD}/r")
        self.watcher = Watcher(stack.host, stack.mqtt_port, f"{names.topic_prefix}/#")
        self.stop_event = threading.Event()
        shape = Shape(cfg.window or 1, cfg.inputs)
        self.hostile = HostileSender(
            stack.host, stack.mqtt_port, names, shape, args.hostile_rate, self.stop_event
        )
        self.ledger: set[str] = set()  # QoS 1 sample ids: each must be learned exactly once
        self.qos0: set[str] = set()  # QoS 0 ids: may be dropped, never learned twice
        self.valid: dict[bytes, tuple[float, bool]] = {}  # correlation -> sent at, bare
        self.flood: dict[bytes, float] = {}
        self.flood_windows: list[tuple[float, float]] = []
        self._lock = threading.Lock()  # the samples connection: two threads publish on it
        self._n = self._big = self._q = self._seq = 0
        self._threads = [threading.Thread(target=self._valid, daemon=True)]

    def _sample(self, prefix: str) -> bytes:
        self._n += 1
        sid = f"{prefix}{self._n}"
        (self.ledger if prefix != "q" else self.qos0).add(sid)
        doc = {**self.demo.payload(1), "id": sid}
        return self.samples.request(
            self.names.samples_topic,
            json.dumps(doc).encode(),
            b"",
            qos=0 if prefix == "q" else 1,
            reply=False,
        )

    def _observation(self) -> bytes:
        """The device's next observation (QoS 1): once its window is full, a sample."""
        self._seq += 1
        step = self.demo.sample(1).x[0, -1].astype(float).round(3).tolist()
        doc = {"key": DEVICE, "seq": self._seq, "x": step, "y": round(sum(step) / 4, 3)}
        return self.samples.request(
            self.names.samples_topic, json.dumps(doc).encode(), b"", reply=False
        )

    def warm_up(self, r: redis.Redis, timeout_s: float) -> None:
        """Samples until the learner published weights and the actor answers with them."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                packets = [self._sample("w") for _ in range(50)]
                packets += [self._observation() for _ in range(self.cfg.window or 0)]
                self.samples.send(b"".join(packets))
            if r.get(self.names.latest_key) and any(
                b'"y"' in rep.payload for rep in self.requests.replies
            ):
                self.requests.replies.clear()
                return
            self.requests.send(self._request(b"warm", bare=False))
            time.sleep(0.5)
        raise RuntimeError("no prediction served during warm-up")

    def _request(
        self, corr: bytes, bare: bool, client: LoadClient | None = None, keyed: bool = False
    ) -> bytes:
        """A whole window, or with `keyed` the device's newest step alone (key-only)."""
        client = client or self.requests
        name = client.reply_topic.split("/")[-2]
        topic = self.names.predict_topic + ("" if bare else f"/{name}")
        doc = {"key": DEVICE, "x": self._x()[-1]} if keyed else {"x": self._x()}
        return client.request(topic, json.dumps(doc).encode(), corr, qos=0)

    def _x(self) -> list:
        return self.demo.sample(1).x[0].astype(float).round(3).tolist()

    def start(self, t0: float) -> None:
        self.t0 = t0
        for t in self._threads:
            t.start()
        self.hostile.start()

    def _valid(self) -> None:
        """Samples at `rate` (and the device's observations) and requests at `request_rate`,
        every 20 ms what is due."""
        tick, i, sent, asked = 0.02, 0, 0, 0
        while not self.stop_event.wait(max(0.0, self.t0 + i * tick - time.monotonic())):
            i += 1
            elapsed = time.monotonic() - self.t0
            due = int(elapsed * self.args.rate) - sent
            if due > 0:
                with self._lock:
                    packets = [self._sample("s") for _ in range(due)]
                    if self.cfg.window and i % 2:
                        packets.append(self._observation())  # 25/s
                    self.samples.send(b"".join(packets))
                sent += due
            due = int(elapsed * self.args.request_rate) - asked
            for _ in range(max(0, due)):
                corr = b"v%d" % asked
                self.valid[corr] = (time.monotonic(), asked % 2 == 1)
                keyed = bool(self.cfg.window) and asked % 3 == 0
                self.requests.send(self._request(corr, asked % 2 == 1, keyed=keyed))
                asked += 1

    def big_message_and_flood(self) -> None:
        """A 10,000-sample message with ids (back-pressure turns on), then a QoS 0 flood."""
        self._big += 1
        n = self.cfg.ingest.max_samples_per_message
        s = self.demo.sample(n)
        ids = [f"b{self._big}-{i}" for i in range(n)]
        self.ledger.update(ids)
        x, y = s.x.astype(float).round(2).tolist(), s.y.astype(float).round(3).tolist()
        doc = {"ids": ids, "x": x, "y": y}  # under max_payload_bytes
        payload = json.dumps(doc).encode()
        with self._lock:
            topic = self.names.samples_topic
            self.samples.send(self.samples.request(topic, payload, b"", reply=False))
        self.qos0_flood()

    def qos0_flood(self) -> None:
        with self._lock:
            self.samples.send(b"".join(self._sample("q") for _ in range(self.args.flood_samples)))

    def request_flood(self, count: int, expiry_s: int = 2) -> None:
        """`count` requests at once, each expiring after `expiry_s` (MQTT v5): the actor
        sheds what its inbox cannot hold and refuses what waited too long."""
        at = time.monotonic()
        topic = f"{self.names.predict_topic}/{FLOOD}"
        packets = []
        for _ in range(count):
            self._q += 1
            corr = b"f%d" % self._q
            self.flood[corr] = at
            payload = json.dumps({"x": self._x()}).encode()
            packets.append(
                publish_packet(
                    topic,
                    payload,
                    response_topic=self.flooder.reply_topic,
                    correlation=corr,
                    expiry_s=expiry_s,
                )
            )
        self.flooder.send(b"".join(packets))
        self.flood_windows.append((at, at + 15.0))

    def stop(self) -> None:
        self.stop_event.set()
        for t in (*self._threads, self.hostile):
            t.join(10)

    def close(self) -> None:
        for c in (self.samples, self.requests, self.flooder, self.watcher):
            c.close()
        self.hostile.close()
