"""`streamlearn status` as text: the figures, each role's presence, the served score, the
actors' lines and the broker's, from the rows `streamlearn.observe.monitor` reads. Apart
from the reading, so that `streamlearn up`'s live line and the command share one format.
"""

from __future__ import annotations

import time
from typing import Any

from streamlearn.observe.broker_delay import advice


def fmt_number(value: object, digits: int = 4) -> str:
    """A figure for the terminal: `-` when unknown."""
    return f"{value:,.{digits}f}" if isinstance(value, int | float) else "-"


def presence_lines(row: dict[str, Any]) -> list[str]:
    """The learner's and ingest's lines of `streamlearn status`: up or not, and how old
    the learner's status is."""
    age, state = row.get("status_age_s"), row.get("learner_state", "absent")
    status = "no status" if age is None else f"status {fmt_number(age, 1)} s old"
    learner = {
        "online": f"online, {status}",
        "starting": "online, starting (no status yet)",
        "stale": f"STALE: {status}, not refreshed (hung?)",
        "offline": f"OFFLINE (presence gone: stopped or dead), last {status}",
        "absent": "none has reported",
    }[state]
    at = row.get("at", time.time())
    ups = [
        f"{p['id']} up {fmt_number(at - p['started_at'], 0)} s"
        for p in row.get("ingest_online", [])
        if isinstance(p.get("started_at"), int | float)
    ]
    ingest = f"{len(ups)} online ({', '.join(ups)})" if ups else "none online"
    lines = [f"  learner: {learner}{cpus_text(row.get('cpus'))}", f"  ingest: {ingest}"]
    for gone in row.get("ingest_away", []):
        lines.append(
            f"  WARNING ingest {gone['id']} away {fmt_number(gone['away_s'], 0)} s: the broker "
            f"queues its share of the samples for {fmt_number(gone['expires_in_s'], 0)} s "
            "more, then drops them (session expiry); start it again with the same instance"
        )
    return lines


def served_line(row: dict[str, Any]) -> list[str]:
    """The served score's line of `streamlearn status`: labels joined to served predictions.

    >>> served_line({"served": {"labels": 3, "loss": 0.5, "accuracy": 1.0, "unknown": 0,
    ...     "delay_p50_s": 5.0, "delay_p95_s": 6.0}})
    ['  served: 3 labels, loss 0.5000, accuracy 1.0000, delay p50 5.0 s p95 6.0 s, 0 unknown ids']
    """
    served = row.get("served")
    if not isinstance(served, dict):
        return []
    metric = "accuracy" if "accuracy" in served else "mae"
    p50, p95 = fmt_number(served.get("delay_p50_s"), 1), fmt_number(served.get("delay_p95_s"), 1)
    return [
        f"  served: {served.get('labels', 0)} labels, loss {fmt_number(served.get('loss'))}, "
        f"{metric} {fmt_number(served.get(metric))}, delay p50 {p50} s p95 {p95} s, "
        f"{served.get('unknown', 0)} unknown ids"
    ]


def cpus_text(cpus: object) -> str:
    """What a worker sized its threads to, as its line of `streamlearn status` ends.

    >>> cpus_text({"usable": 1, "from": "cgroup cpu.max 100000/100000", "intra_op_threads": 1})
    ', 1 CPU (cgroup cpu.max 100000/100000)'
    """
    if not isinstance(cpus, dict) or "usable" not in cpus:
        return ""
    n = cpus["usable"]
    return f", {n} CPU{'' if n == 1 else 's'} ({cpus.get('from', '-')})"


def actor_line(a: dict[str, Any]) -> str:
    """One actor of `streamlearn status`: version, weights age, rate, the broker's delay
    of a QoS 1 request's reply (`streamlearn.observe.broker_delay`), status age, and the
    CPUs its threads were sized to."""
    age, rps = fmt_number(a.get("weights_age_s"), 1), fmt_number(a.get("requests_per_s"), 1)
    delay = fmt_number(a.get("broker_delay_ms"), 1)
    seen = f"status {fmt_number(a.get('age_s'), 1)} s old" + (" STALE" if a.get("stale") else "")
    return (
        f"  actor {a['id']:<20} version {a.get('version', '-'):>6}  "
        f"weights age {age} s  {rps} requests/s  broker delay {delay} ms  {seen}"
        f"{cpus_text(a.get('cpus'))}"
    )


def broker_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The broker's line of `streamlearn status`, a warning first when it dropped messages
    and when an actor measured it holding replies (Nagle's algorithm).

    >>> broker_lines([{"actors": [{"broker_delay_ms": 43.0}], "broker": {}}])[0][:34]
    'WARNING: the broker delays a reply'
    """
    delays = [a.get("broker_delay_ms") for r in rows for a in r.get("actors", [])]
    slow = max((d for d in delays if isinstance(d, int | float)), default=None)
    nagle = advice(slow)
    lines = [] if nagle is None else [f"WARNING: {nagle}"]
    broker = rows[0].get("broker", {}) if rows else {}
    if "dropped_messages" not in broker:
        return [*lines, "broker: counters not readable by this account ($SYS/broker/...)"]
    if "warning" in broker:
        lines.append(f"WARNING: {broker['warning']}")
    lines.append(
        f"broker: {broker['dropped_messages']} messages dropped "
        f"({fmt_number(broker.get('dropped_per_min_5min'), 1)}/min over 5 min), "
        f"{broker.get('stored_messages', '-')} stored ({broker.get('stored_bytes', '-')} bytes), "
        f"up {broker.get('uptime_s', '-')} s"
    )
    return lines
