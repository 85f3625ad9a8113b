"""Ingest throughput against a raw paho subscriber on the same broker, in one run.

    .venv/bin/python -m bench.ingest [--messages 30000] [--batched 3000] [--rounds 5]
    .venv/bin/python -m bench.ingest --quick     # the CI smoke: ~40 s, half of each goal

Starts its own mosquitto (the embedded config) and redis-server. A raw paho subscriber
(QoS 1, auto-acknowledged, doing nothing with the message) and one real ingest process
(`python -m workers.ingest`: validation, de-duplication by id, append to Redis, PUBACK
after) take turns, round after round, at the same stream from the same publisher
processes (`live`); a rate is messages over the time from the first to the last one
received (raw) or appended to the stream (ingest). While a subscriber keeps up, both sides
run at the publishers' rate (reported beside them) and their ratio says only that ingest
keeps up; `backlog`, where the subscriber drains what the broker queued while it was
away, with no publisher beside it, measures capacity, and its ratio is checked too. Each
backlog round is followed by one of named objects (4 named inputs, 6 fields the model
does not use, as a device sends them) on a model with named inputs: its rate against the
positional round's.

Everything shares the machine's cores, and other work on it moves both sides alike, so a
ratio is taken between the rounds of one pair and the median over pairs is reported.
No learner runs, so back-pressure is set out of the way (max_backlog_samples).

Beside them, in this process: ingest's parse of single-sample messages against
`json.loads` of the same payloads (best of several passes each, interleaved), so that a
slower parse shows even where the end-to-end ratios have room to hide it.

Last, `labels`: 100-label messages on the labels topic through a real ingest process, each
label joined to a prediction kept beforehand as an actor keeps it (`streamlearn.store.pending`),
appended and scored: labels/s from the first to the last stream entry they made. Then
the assembled case (`bench._assembly`) and Sparkplug B DDATA by alias (`bench._sparkplug`),
each queued at the broker and read by a real ingest process, against the raw subscriber.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import numpy as np
import paho.mqtt.client as paho
import redis
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bench._assembly import run_assembly
from bench._labels import run_labels
from bench._report import exit_status, goal, report
from bench._sparkplug import run_sparkplug_ingest
from streamlearn.config import parse_config
from streamlearn.contract.names import Names
from streamlearn.contract.payloads import PayloadParser
from streamlearn.stack import embedded

ROOT = Path(__file__).resolve().parents[1]
INPUTS = 9
TOML = """
[models.{model}]
inputs = {inputs}
task = "binary"

[models.{model}.ingest]
max_backlog_samples = 100_000_000
"""


NAMED = ["temperature", "vibration", "rpm", "load"]
# What such a device sends besides: read, ignored and counted by ingest
EXTRA = {"rssi": -61, "battery": 97, "linkquality": 132, "voltage": 3.01, "fw": "1.2.3"}


def payloads(publisher: int, count: int, per_message: int, named: bool = False) -> list[bytes]:
    """Distinct samples with ids; floats at full precision, as devices send them. `named`:
    a device's object of 4 named inputs, its label, its id and 6 fields more."""
    rng = np.random.default_rng(publisher)
    out = []
    if named:
        for i in range(count):
            values = dict(zip(NAMED, rng.standard_normal(len(NAMED)).tolist(), strict=True))
            doc = {**values, **EXTRA, "uptime": i, "y": int(rng.integers(0, 2))}
            out.append(json.dumps({**doc, "id": f"p{publisher}-{i}"}).encode())
        return out
    for i in range(count):
        x = rng.standard_normal((per_message, INPUTS)).tolist()
        y = rng.integers(0, 2, per_message).tolist()
        if per_message == 1:
            out.append(json.dumps({"x": x[0], "y": y[0], "id": f"p{publisher}-{i}"}).encode())
        else:
            ids = [f"p{publisher}-{i}-{j}" for j in range(per_message)]
            out.append(json.dumps({"x": x, "y": y, "ids": ids}).encode())
    return out


def publish(
    port: int,
    topic: str,
    publisher: int,
    count: int,
    per_message: int,
    out: mp.Queue,
    named: bool = False,
) -> None:
    """One device process: QoS 1 as fast as the broker acknowledges; puts (first publish,
    last PUBACK) on `out`, in `time.perf_counter()` (the same clock in every process)."""
    data = payloads(publisher, count, per_message, named)
    client = paho.Client(CallbackAPIVersion.VERSION2, protocol=paho.MQTTv5)
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port)
    client.loop_start()
    started = time.perf_counter()
    infos = [client.publish(topic, p, qos=1) for p in data]
    for info in infos:
        info.wait_for_publish(120)
    out.put((started, time.perf_counter()))
    client.disconnect()
    client.loop_stop()


def expected(messages: int, publishers: int) -> int:
    """Messages sent: each publisher sends an equal share."""
    return messages // publishers * publishers


def publishers(
    port: int, topic: str, messages: int, count: int, per_message: int, named: bool = False
) -> float:
    """Publish `messages` from `count` processes; returns their rate (messages/s), from
    the first publish to the last PUBACK: what a subscriber that keeps up can show."""
    out: mp.Queue = mp.Queue()
    each = messages // count
    procs = [
        mp.Process(target=publish, args=(port, topic, k, each, per_message, out, named))
        for k in range(count)
    ]
    for p in procs:
        p.start()
    spans = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join()
    return each * count / (max(e for _, e in spans) - min(s for s, _ in spans))


def raw_subscriber(
    port: int, topic: str, expect: int, ready: mp.Event, go: mp.Event, out: mp.Queue
) -> None:
    """The baseline: a paho subscriber that receives, counts and auto-acknowledges."""
    seen = [0, 0.0, 0.0]
    done, subscribed = threading.Event(), threading.Event()

    def on_message(_c: object, _u: object, _m: object) -> None:
        now = time.perf_counter()
        seen[0] += 1
        if seen[0] == 1:
            seen[1] = now
        if seen[0] == expect:
            seen[2] = now
            done.set()

    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=topic, protocol=paho.MQTTv5)
    client.on_message = on_message
    client.on_subscribe = lambda *_: subscribed.set()
    client.on_connect = lambda c, *_: c.subscribe(f"$share/bench/{topic}", qos=1)
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 600
    client.connect("127.0.0.1", port, clean_start=False, properties=props)
    client.loop_start()
    subscribed.wait(30)
    if not go.is_set():  # backlog: go away while the broker queues, then come back
        client.disconnect()
        client.loop_stop()
        ready.set()
        go.wait(300)
        cpu = sum(os.times()[:2])
        client.reconnect()
        client.loop_start()
    else:
        cpu = sum(os.times()[:2])
        ready.set()
    done.wait(300)
    cpu = sum(os.times()[:2]) - cpu
    client.disconnect()
    client.loop_stop()
    out.put((seen[0], seen[2] - seen[1], cpu))


class IngestProcess:
    """`python -m workers.ingest` on the bench's servers, with its CPU time read from /proc."""

    def __init__(
        self, mqtt_port: int, redis_port: int, model: str, workdir: Path, named: bool = False
    ) -> None:
        config = workdir / f"{model}.toml"
        config.write_text(TOML.format(model=model, inputs=json.dumps(NAMED) if named else INPUTS))
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEARN_")}
        env |= {
            "STREAMLEARN_MQTT_URL": f"mqtt://127.0.0.1:{mqtt_port}",
            "STREAMLEARN_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "STREAMLEARN_TOPIC_PREFIX": "bench",
            "STREAMLEARN_SHARE_GROUP": "bench",
        }
        self.argv = [sys.executable, "-m", "streamlearn.ingest.worker", "--config", str(config)]
        self.env = env

    def start(self) -> IngestProcess:
        self.proc = subprocess.Popen(
            [*self.argv, "--instance", "bench"],
            env=self.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=embedded.die_with_parent,
        )
        self.lines: list[str] = []
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.append(line)
            if " ready" in line:
                break
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()  # type: ignore[arg-type]
        self.cpu_at_start = self.cpu_s()
        return self

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def redis_cpu_s(store: redis.Redis) -> float:
    info = store.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run_raw(port: int, tag: str, messages: int, pubs: int, per: int, mode: str) -> dict:
    topic = Names(tag, "bench").samples_topic
    ready, go, out = mp.Event(), mp.Event(), mp.Queue()
    if mode == "live":
        go.set()
    expect = expected(messages, pubs)
    sub = mp.Process(target=raw_subscriber, args=(port, topic, expect, ready, go, out))
    sub.start()
    ready.wait(30)
    published = publishers(port, topic, messages, pubs, per)
    go.set()
    got, seconds, cpu = out.get(timeout=300)
    sub.join()
    return row(mode, "raw paho subscriber", per, got, seconds, cpu, None, published)


def run_ingest(
    mqtt_port: int,
    store: redis.Redis,
    tag: str,
    messages: int,
    pubs: int,
    per: int,
    mode: str,
    workdir: Path,
    named: bool = False,
) -> dict:
    names = Names(tag, "bench")
    port = store.connection_pool.connection_kwargs["port"]
    worker = IngestProcess(mqtt_port, port, tag, workdir, named).start()
    if mode == "backlog":  # its session queues at the broker while it is away
        worker.stop()
        published = publishers(mqtt_port, names.samples_topic, messages, pubs, per, named)
        worker.start()
    redis_cpu = redis_cpu_s(store)
    if mode == "live":
        published = publishers(mqtt_port, names.samples_topic, messages, pubs, per, named)
    deadline = time.monotonic() + 300
    while int(store.get(names.ingest_count_key) or 0) < expected(messages, pubs) * per:
        if time.monotonic() > deadline or worker.proc.poll() is not None:
            raise SystemExit("ingest did not finish:\n" + "".join(worker.lines[-30:]))
        time.sleep(0.02)
    cpu = worker.cpu_s() - worker.cpu_at_start
    redis_cpu = redis_cpu_s(store) - redis_cpu
    worker.stop()
    key = names.samples_key
    first, last = store.xrange(key, count=1)[0][0], store.xrevrange(key, count=1)[0][0]
    seconds = (int(last.split(b"-")[0]) - int(first.split(b"-")[0])) / 1000
    messages = int(store.get(names.ingest_count_key)) // per  # an entry holds a run of them
    who = "ingest process, named fields" if named else "ingest process"
    return row(mode, who, per, messages, seconds, cpu, redis_cpu, published)


def row(
    mode: str,
    who: str,
    per: int,
    messages: int,
    seconds: float,
    cpu: float,
    redis_cpu: float | None,
    published: float,
) -> dict:
    return {
        "mode": mode,
        "subscriber": who,
        "samples/msg": per,
        "messages": messages,
        "seconds": seconds,
        "msgs/s": messages / seconds,
        # live: the publishers' rate (a subscriber that keeps up shows this, not capacity)
        "published msgs/s": published if mode == "live" else None,
        "samples/s": messages * per / seconds,
        "cpu us/msg": cpu / messages * 1e6,
        "redis cpu us/msg": None if redis_cpu is None else redis_cpu / messages * 1e6,
    }


def parse_cost(passes: int = 7, count: int = 3000) -> dict:
    """Ingest's parse of single-sample messages against `json.loads` of the same payloads:
    the best of `passes` interleaved passes each, in microseconds per message."""
    model = parse_config(tomllib.loads(TOML.format(model="p", inputs=INPUTS))).model("p")
    parse = PayloadParser(model).parse_message
    data = payloads(0, count, 1)
    best = {"parse": math.inf, "json.loads": math.inf}
    for _ in range(passes):
        for name, call in (("parse", parse), ("json.loads", json.loads)):
            started = time.perf_counter()
            for raw in data:
                call(raw)
            best[name] = min(best[name], (time.perf_counter() - started) / count * 1e6)
    return {
        "mode": "in-process",
        "subscriber": "parse vs json.loads",
        "samples/msg": 1,
        "messages": count,
        "parse us/msg": best["parse"],
        "json.loads us/msg": best["json.loads"],
        "vs json.loads": best["parse"] / best["json.loads"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.ingest")
    parser.add_argument("--messages", type=int, default=30_000, help="single-sample messages")
    parser.add_argument("--batched", type=int, default=3_000, help="100-sample messages")
    parser.add_argument("--publishers", type=int, default=3, help="publishing processes")
    parser.add_argument("--rounds", type=int, default=5, help="raw/ingest pairs per live case")
    parser.add_argument("--backlog-rounds", type=int, default=3, help="pairs of the capacity case")
    parser.add_argument("--labels", type=int, default=1_500, help="100-label messages")
    parser.add_argument(
        "--quick", action="store_true", help="CI smoke: one short pair a case, half of each goal"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.batched, args.rounds, args.backlog_rounds = 9000, 900, 1, 1
        args.labels = 450
    load = os.getloadavg()
    cases = [("live", 1, args.messages, args.rounds), ("live", 100, args.batched, args.rounds)]
    cases.append(("backlog", 1, args.messages, args.backlog_rounds))
    parsing = parse_cost()
    rows, ratios, raw_backlog = [parsing], {}, []
    with (
        tempfile.TemporaryDirectory(prefix="sl-bench-ingest-") as tmp,
        embedded.mosquitto(workdir=Path(tmp, "mqtt")) as broker,
        embedded.redis_server(workdir=Path(tmp, "redis")) as server,
    ):
        store = redis.Redis(port=server.port)
        for mode, per, messages, rounds in cases:
            for r in range(rounds):
                tag = f"{mode}{per}r{r}"
                raw = run_raw(broker.port, f"raw{tag}", messages, args.publishers, per, mode)
                ours = run_ingest(
                    broker.port, store, tag, messages, args.publishers, per, mode, Path(tmp)
                )
                ours["vs raw"] = ours["msgs/s"] / raw["msgs/s"]
                ratios.setdefault((mode, per), []).append(ours)
                rows += [raw | {"round": r}, ours | {"round": r}]
                if mode == "backlog":  # named fields, against this positional round
                    raw_backlog.append(raw["msgs/s"])
                    args_ = (broker.port, store, f"named{tag}", messages, args.publishers, 1)
                    named = run_ingest(*args_, mode, Path(tmp), named=True)
                    named["vs positional"] = named["msgs/s"] / ours["msgs/s"]
                    ratios.setdefault(("named", 1), []).append(named)
                    rows.append(named | {"round": r})
                    print(f"named backlog round {r}: {named['msgs/s']:,.0f} msgs/s", flush=True)
                print(
                    f"{mode} {per}/msg round {r}: raw {raw['msgs/s']:,.0f} msgs/s, "
                    f"ingest {ours['msgs/s']:,.0f} msgs/s",
                    flush=True,
                )
        joining = run_labels(
            broker.port,
            store,
            args.labels,
            args.publishers,
            Path(tmp),
            lambda tag: IngestProcess(broker.port, server.port, tag, Path(tmp)),
            INPUTS,
        )
        rows.append(joining)
        print(f"labels 100/msg: {joining['labels/s']:,.0f} labels/s", flush=True)
        assembling = run_assembly(
            broker.port,
            store,
            args.messages,
            args.publishers,
            lambda tag: IngestProcess(broker.port, server.port, tag, Path(tmp)),
            statistics.median(raw_backlog),
        )
        rows.append(assembling)
        print(f"assembled: {assembling['samples/s']:,.0f} samples/s", flush=True)
        sparkplug = run_sparkplug_ingest(
            broker.port,
            store,
            args.messages,
            args.publishers,
            lambda tag: IngestProcess(broker.port, server.port, tag, Path(tmp)),
            statistics.median(raw_backlog),
        )
        rows.append(sparkplug)
        print(f"sparkplug: {sparkplug['msgs/s']:,.0f} DDATA/s", flush=True)
    single = statistics.median(o["vs raw"] for o in ratios[("live", 1)])
    batched = statistics.median(o["samples/s"] for o in ratios[("live", 100)])
    capacity = statistics.median(o["vs raw"] for o in ratios[("backlog", 1)])
    # Keeping up: ingest's live rate against the rate its publishers managed at the time.
    kept = statistics.median(o["msgs/s"] / o["published msgs/s"] for o in ratios[("live", 1)])
    slower = parsing["vs json.loads"]
    named = statistics.median(o["vs positional"] for o in ratios[("named", 1)])
    q = args.quick
    checks = {
        f"live single-sample messages: ingest >= 95% of the raw subscriber's rate "
        f"(median of pairs {single:.0%})": goal(single, 0.95, q),
        f"live single-sample messages: ingest keeps up, >= 90% of the publishers' rate "
        f"(median {kept:.0%})": goal(kept, 0.9, q),
        f"live 100 samples/message: one ingest process >= 100,000 samples/s "
        f"(median {batched:,.0f})": goal(batched, 100_000, q),
        f"backlog (capacity, no publisher beside it): ingest >= 95% of the raw subscriber's "
        f"rate (median of {len(ratios[('backlog', 1)])} pairs {capacity:.0%})": goal(
            capacity, 0.95, q
        ),
        f"parse of a single-sample message <= 1.4x json.loads of it ({slower:.2f}x)": goal(
            1 / slower, 1 / 1.4, q
        ),
        f"named fields (4 inputs, 6 fields more), backlog: ingest >= 0.8x its rate of "
        f"positional single-sample messages (median of pairs {named:.2f}x)": goal(named, 0.8, q),
        f"labels, 100/message: one ingest process joins >= 20,000 labels/s "
        f"({joining['labels/s']:,.0f})": goal(joining["labels/s"], 20_000, q),
        f"assembled (a topic per input, 4 readings a sample), backlog: ingest reads >= 0.5x "
        f"the raw subscriber's messages/s ({assembling['vs raw']:.2f}x, "
        f"{assembling['samples/s']:,.0f} samples/s)": goal(assembling["vs raw"], 0.5, q),
        f"Sparkplug B DDATA (3 metrics by alias, births in Redis, held), backlog: ingest >= "
        f"0.5x the raw subscriber's messages/s ({sparkplug['vs raw']:.2f}x, "
        f"{sparkplug['msgs/s']:,.0f} msgs/s)": goal(sparkplug["vs raw"], 0.5, q),
    }
    report(
        "ingest",
        rows,
        checks,
        quick=q,
        figures={
            "live_vs_raw": single,
            "live_vs_published": kept,
            "live_100_samples_per_s": batched,
            "backlog_vs_raw": capacity,
            "parse_vs_json_loads": slower,
            "named_vs_positional": named,
            "labels_per_s": joining["labels/s"],
            "assembled_vs_raw": assembling["vs raw"],
            "assembled_samples_per_s": assembling["samples/s"],
            "sparkplug_vs_raw": sparkplug["vs raw"],
            "sparkplug_msgs_per_s": sparkplug["msgs/s"],
        },
        publishers=args.publishers,
        loadavg_before=load,
        loadavg_after=os.getloadavg(),
    )
    return exit_status(checks)


if __name__ == "__main__":
    raise SystemExit(main())
