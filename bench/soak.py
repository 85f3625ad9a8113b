"""Soak: minutes of valid and hostile traffic against the real stack, then its promises.

Its own mosquitto and redis-server; ingest, learner and actor as the real worker
processes (a conv1d model with a window, so keyed observations are in play). For the
duration: QoS 1 samples with unique ids (the ledger), now and then a 10,000-sample message
and a QoS 0 flood behind it while back-pressure holds; prediction requests whose replies
are checked, and request floods; the hostile inputs of `bench.hostile` at a steady rate;
and for a while Redis capped at just above its memory in use (noeviction). Then:

- no process died or was restarted (same pids, alive);
- each worker's RSS at the end is within 1.5x of its RSS after warm-up;
- every QoS 1 sample was learned exactly once: an audit consumer group reads every stream
  entry's ids (none missing, none twice, none unknown), and the learner trained on as many
  samples as ingest appended, dead-lettered none and left none pending;
- every hostile samples message was dead-lettered with a reason, and every hostile
  request got an error reply in its sender's own reply space and no reply elsewhere.

    .venv/bin/python -m bench.soak [--duration-s 300] [--rate 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import tomllib
from collections import Counter
from pathlib import Path

import redis

from bench import hostile
from bench._report import report
from bench._soak_traffic import (
    VALID,
    Audit,
    HostileSender,
    Traffic,
    rss_kib,
    scrape,
)
from bench._stack import Proc, Stack, broker
from streamlearn.config import parse_config
from streamlearn.contract.names import Names
from streamlearn.stack import embedded

PREFIX = "soak"
MODEL = "soak"
CONFIG = """
[models.soak]
inputs = 2
task = "regression"
architecture = "conv1d"
window = 4
hidden = [16, 16]
learning_rate = 0.01

[models.soak.ingest]
max_backlog_samples = 5000   # a 10,000-sample message turns back-pressure on

[models.soak.gateways]
soak-v = ["soak-dev"]   # the valid requester asks for the device's window (key-only)
"""
ROLES = ("learner", "ingest", "actor")


def start_stack(stack: Stack, config: Path) -> tuple[dict[str, Proc], dict[str, int]]:
    """The workers, each with its metrics on a port of its own; all or none."""
    procs, ports = {}, {}
    try:
        for role in ROLES:
            ports[role] = embedded.free_port()
            env = {**stack.env(PREFIX), "STREAMLEARN_METRICS_PORT": str(ports[role])}
            argv = [sys.executable, "-m", f"streamlearn.{role}.worker", "--config", str(config)]
            procs[role] = Proc([*argv, "--instance", "soak"], env)
            procs[role].wait_for(" ready", timeout_s=120)
    except BaseException:
        for p in procs.values():
            p.stop(kill=True)
        raise
    return procs, ports


class Soak:
    """One run: the stack, the schedule, and what is measured along the way."""

    def __init__(self, args: argparse.Namespace, stack: Stack, work: Path) -> None:
        self.args, self.stack = args, stack
        self.names = Names(MODEL, PREFIX, PREFIX)
        self.cfg = parse_config(tomllib.loads(CONFIG)).model(MODEL)
        self.config = work / "soak.toml"
        self.config.write_text(CONFIG)
        self.r = redis.Redis.from_url(stack.redis_url)
        self.deaths: dict[str, float] = {}
        self.rss_warm: dict[str, int | None] = {}
        self.rss_max: Counter[str] = Counter()
        self.rss_series: list[dict[str, float | int | None]] = []  # every 10 s
        self.redis_errors_at_cap = 0

    def run(self) -> int:
        args, r, names = self.args, self.r, self.names
        stop_audit = threading.Event()
        audit_redis = redis.Redis.from_url(self.stack.redis_url)
        audit = Audit(audit_redis, names, self.cfg.sample_shape, stop_audit)
        audit.stream.ensure_group()
        audit.start()
        procs, ports = start_stack(self.stack, self.config)
        self.procs, self.ports = procs, ports
        self.pids = {role: p.proc.pid for role, p in procs.items()}
        traffic = Traffic(self.stack, names, self.cfg, args)
        try:
            print(f"stack up: pids {self.pids}; warming up", flush=True)
            traffic.warm_up(r, timeout_s=120)
            self.schedule(traffic)
            traffic.stop()
            print(f"  {args.duration_s:.0f} s: traffic stopped; draining", flush=True)
            drained = self.drain(audit, traffic)
            time.sleep(3)  # the last replies
            stop_audit.set()
            audit.join(5)
            audit.poll(block_ms=None)
            metrics = {role: scrape(port) for role, port in ports.items()}
            rss_end = {role: rss_kib(pid) for role, pid in self.pids.items()}
            alive = {
                role: p.proc.poll() is None and p.proc.pid == self.pids[role]
                for role, p in procs.items()
            }
        finally:
            stop_audit.set()
            traffic.stop()
            for p in procs.values():
                p.stop()
            traffic.close()
        rows, checks = self.evaluate(traffic, audit, metrics, alive, rss_end)
        checks[f"drained: the learner caught up within {args.drain_s:.0f} s"] = drained
        meta = {
            "settings": vars(args),
            "metrics": metrics,
            "deadletter_reasons": Counter(reason[:80] for _, reason, _, _ in audit.deadletters),
            "rss_kib_every_10s": self.rss_series,
            "logs_tail": {role: p.lines[-40:] for role, p in procs.items()},
        }
        report("soak", rows, checks, **meta)
        return 0 if all(checks.values()) else 1

    def schedule(self, traffic: Traffic) -> None:
        args, r = self.args, self.r
        duration, warmup = args.duration_s, min(30.0, args.duration_s / 5)
        self.oom = (0.4 * duration, 0.4 * duration + min(60.0, 0.2 * duration))
        floods = [0.3 * duration, 0.75 * duration]
        t0 = time.monotonic()
        traffic.start(t0)
        state, next_big = "before", warmup / 2
        try:
            while (now := time.monotonic() - t0) < duration:
                self.watch(now)
                if not self.rss_warm and now >= warmup:
                    self.rss_warm = {role: rss_kib(pid) for role, pid in self.pids.items()}
                    print(f"  {now:.0f} s: RSS after warm-up (KiB) {self.rss_warm}", flush=True)
                if now >= next_big:
                    traffic.big_message_and_flood()
                    next_big += args.big_every_s
                if floods and now >= floods[0]:
                    floods.pop(0)
                    traffic.request_flood(args.flood_requests)
                if state == "before" and now >= self.oom[0]:
                    used = int(r.info("memory")["used_memory"])
                    r.config_set("maxmemory-policy", "noeviction")
                    r.config_set("maxmemory", used + 256 * 1024)
                    state = "capped"
                    self.redis_errors_at_cap = scrape(self.ports["ingest"]).get(
                        "streamlearn_ingest_redis_errors_total", 0
                    )
                    print(f"  {now:.0f} s: Redis maxmemory = used {used} + 256 KiB", flush=True)
                    traffic.qos0_flood()
                elif state == "capped" and now >= self.oom[1]:
                    r.config_set("maxmemory", 0)
                    state = "restored"
                    print(f"  {now:.0f} s: Redis maxmemory restored", flush=True)
                time.sleep(0.2)
        finally:
            r.config_set("maxmemory", 0)

    def watch(self, now: float) -> None:
        """Deaths, and the workers' RSS (KiB): the maximum, and a sample every 10 s."""
        rss = {role: rss_kib(pid) for role, pid in self.pids.items()}
        for role, p in self.procs.items():
            if role not in self.deaths and p.proc.poll() is not None:
                self.deaths[role] = now
                print(f"  {role} died at {now:.0f} s (rc {p.proc.returncode})", flush=True)
            self.rss_max[role] = max(self.rss_max[role], rss[role] or 0)
        if now >= 10 * len(self.rss_series):
            self.rss_series.append({"t_s": round(now), **rss})

    def drain(self, audit: Audit, traffic: Traffic) -> bool:
        """Until every ledger id was read and the learner trained on all ingest appended."""
        deadline = time.monotonic() + self.args.drain_s
        ledger = traffic.ledger | traffic.hostile.valid_ids
        while time.monotonic() < deadline:
            self.watch(-1)
            learner = scrape(self.ports["learner"])
            trained = learner.get("streamlearn_learner_samples_total", -1) + learner.get(
                "streamlearn_learner_dead_lettered_samples_total", 0
            )
            appended = int(self.r.get(self.names.ingest_count_key) or 0)
            pending = self.r.xpending(self.names.samples_key, "learners")["pending"]
            if not (ledger - audit.ids.keys()) and trained == appended and not pending:
                return True
            time.sleep(1)
        return False

    def evaluate(
        self,
        traffic: Traffic,
        audit: Audit,
        metrics: dict[str, dict[str, float]],
        alive: dict[str, bool],
        rss_end: dict[str, int | None],
    ) -> tuple[list[dict], dict[str, bool]]:
        rows: list[dict] = []
        checks: dict[str, bool] = {}
        ratios = {}
        for role in ROLES:
            warm, end = self.rss_warm.get(role), rss_end.get(role)
            ratios[role] = end / warm if warm and end else float("inf")
            died = self.deaths.get(role)
            state = "alive, same pid" if alive[role] else f"DIED at {died or -1:.0f} s"
            rows.append(
                _row(
                    f"process {role} (pid {self.pids[role]})",
                    detail=f"{state}; RSS {_mib(warm)} after warm-up, {_mib(end)} at the end "
                    f"({ratios[role]:.2f}x), max {_mib(self.rss_max[role])}; tracebacks "
                    f"logged {sum('Traceback' in line for line in self.procs[role].lines)}",
                )
            )
        checks["no process died or restarted (same pids, alive)"] = (
            all(alive.values()) and not self.deaths
        )
        worst = max(ratios, key=ratios.get)
        checks[f"RSS at the end <= 1.5x after warm-up (worst: {worst} {ratios[worst]:.2f}x)"] = (
            ratios[worst] <= 1.5
        )

        learner, ingest = metrics["learner"], metrics["ingest"]
        ledger = traffic.ledger | traffic.hostile.valid_ids
        counts = audit.ids
        missing = ledger - counts.keys()
        twice = sorted(i for i, c in counts.items() if c > 1)
        unknown = counts.keys() - ledger - traffic.qos0
        rows.append(
            _row(
                "valid samples, QoS 1, unique ids (ledger)",
                len(ledger),
                len(ledger - missing) - len(ledger.intersection(twice)),
                detail=f"missing {len(missing)} {sorted(missing)[:3]}, twice {len(twice)} "
                f"{twice[:3]}, unknown ids in the stream {len(unknown)}",
            )
        )
        checks[
            f"learned exactly once, 1: every QoS 1 sample in the stream once (ledger "
            f"{len(ledger)}: missing {len(missing)}, twice {len(twice)}, unknown {len(unknown)})"
        ] = not missing and not twice and not unknown
        q_in = traffic.qos0 & counts.keys()
        rows.append(
            _row(
                "QoS 0 sample floods, ids",
                len(traffic.qos0),
                len(q_in),
                detail=f"dropped {len(traffic.qos0) - len(q_in)} (QoS 0 may be; ingest counted "
                f"{ingest.get('streamlearn_ingest_qos0_dropped_total', 0):.0f}), "
                + ("none twice" if not set(twice) & traffic.qos0 else "SOME TWICE"),
            )
        )
        appended = int(self.r.get(self.names.ingest_count_key) or 0)
        trained = int(learner.get("streamlearn_learner_samples_total", -1))
        lettered = int(learner.get("streamlearn_learner_dead_lettered_samples_total", -1))
        pending = self.r.xpending(self.names.samples_key, "learners")["pending"]
        from_learner = sum(1 for source, *_ in audit.deadletters if source == "learner")
        rows.append(
            _row(
                "learner: samples trained / appended by ingest",
                appended,
                trained,
                detail=f"dead-lettered by the learner {lettered} ({from_learner} dead letters), "
                f"pending {pending}, in the stream's entries {audit.samples}",
            )
        )
        checks[
            f"learned exactly once, 2: the learner trained on every appended sample (appended "
            f"{appended}, trained "
            f"{trained}, dead-lettered {lettered}, pending {pending})"
        ] = trained == appended == audit.samples and lettered == 0 and pending == 0

        seen, names = traffic.watcher.seen, self.names
        ok = bad = excused = 0
        for corr, (at, bare) in traffic.valid.items():
            replies = seen.get(corr, [])
            good = [v for t, v, _ in replies if hostile.reply_allowed(names, VALID, bare, t)]
            if good == ["y"] and len(replies) == 1:
                ok += 1
            elif any(a <= at <= b for a, b in traffic.flood_windows) and "y" not in good:
                excused += 1  # shed or past its deadline while a flood was served
            else:
                bad += 1
        rows.append(
            _row(
                "valid requests (windows, key-only; predict/{client}, bare)",
                len(traffic.valid),
                ok,
                bad,
                f"refused or unanswered during a request flood: {excused}",
            )
        )
        checks[f"every valid request answered with a prediction ({bad} not)"] = bad == 0
        actor = metrics["actor"]
        shed = sum(v for k, v in actor.items() if "shed" in k and "bytes" not in k)
        verdicts = Counter(
            next((v for _, v, _ in seen.get(c, [])), "unanswered") for c in traffic.flood
        )
        rows.append(
            _row(
                f"request floods ({len(traffic.flood_windows)} bursts, QoS 0)",
                len(traffic.flood),
                verdicts["y"] + verdicts["error"],
                verdicts["unanswered"],
                f"predictions {verdicts['y']}, error replies {verdicts['error']} (the "
                f"actor's expired {actor.get('streamlearn_actor_expired_requests_total', 0):.0f}"
                f"), shed {shed:.0f}; expiry 2 s",
            )
        )
        checks[
            f"every flood request answered or counted as shed ({verdicts['unanswered']} "
            f"unanswered, {shed:.0f} shed)"
        ] = verdicts["unanswered"] <= shed

        sender = traffic.hostile
        hostile_rows, all_refused = hostile.outcomes(
            sender.sent,
            seen,
            audit.deadletters,
            names,
            HostileSender.CLIENT,
            sender.shape,
            excused=lambda s: any(a <= s.at <= b for a, b in traffic.flood_windows),
        )
        rows += hostile_rows
        refused = sum(r["ok"] for r in hostile_rows)
        total = sum(r["sent"] for r in hostile_rows)
        checks[
            f"every hostile input refused: dead letter with a reason or error reply in the "
            f"sender's reply space, no leak ({refused} of {total})"
        ] = all_refused
        errors = ingest.get("streamlearn_ingest_redis_errors_total", 0)
        refused = ", ".join(
            f"{k.removeprefix('streamlearn_learner_').removesuffix('_total')} {v:.0f}"
            for k, v in learner.items()
            if k.endswith("failures_total") and v
        )
        rows.append(
            _row(
                "Redis capped at used_memory + 256 KiB, noeviction",
                detail=f"{self.oom[0]:.0f}-{self.oom[1]:.0f} s; ingest redis_errors "
                f"{errors - self.redis_errors_at_cap:.0f} from the cap on; learner "
                f"{refused or 'no failures'}",
            )
        )
        return rows, checks


def _row(
    traffic: str,
    sent: int | None = None,
    ok: int | None = None,
    bad: int | None = None,
    detail: str = "",
) -> dict:
    if bad is None and sent is not None and ok is not None:
        bad = sent - ok
    return {"traffic": traffic, "sent": sent, "ok": ok, "bad": bad, "detail": detail}


def _mib(kib: int | None) -> str:
    return "?" if not kib else f"{kib / 1024:.0f} MiB"


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.soak", description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--duration-s", type=_positive, default=300.0, help="of traffic (then the drain)")
    add("--rate", type=_positive, default=200.0, help="QoS 1 samples/s, one per message")
    add("--request-rate", type=_positive, default=50.0, help="valid requests/s")
    add("--hostile-rate", type=_positive, default=4.0, help="hostile messages/s")
    add("--big-every-s", type=_positive, default=45.0, help="a 10,000-sample message each")
    add("--flood-requests", type=int, default=10_000, help="requests per flood (two)")
    add("--flood-samples", type=int, default=20_000, help="QoS 0 samples per flood")
    add("--drain-s", type=_positive, default=180.0, help="for the learner to catch up, at most")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        work = Path(tmp)
        with (
            broker(work / "mqtt", nagle=False) as mqtt,
            embedded.redis_server(workdir=work / "redis") as store,
        ):
            return Soak(args, Stack(mqtt.port, store.port, work), work).run()


if __name__ == "__main__":
    raise SystemExit(main())
