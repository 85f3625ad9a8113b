"""`streamlearn status`: each model's queue, learner, weights, variants and actors, as a
table (`format_status`) or JSON rows, once or every few seconds."""

from __future__ import annotations

import argparse
import json
import sys
import time

from streamlearn.cli import versions
from streamlearn.config.app import AppConfig
from streamlearn.config.loading import load_config
from streamlearn.config.settings import load_settings
from streamlearn.observe.monitor import read_status
from streamlearn.observe.status_text import (
    actor_line,
    broker_lines,
    fmt_number,
    presence_lines,
    served_line,
)


def run(args: argparse.Namespace) -> int:
    """`streamlearn status [--json] [--watch [SECONDS]]`."""
    cfg: AppConfig = load_config(args.config)
    settings = load_settings()
    print(settings.which_stack(), file=sys.stderr)
    while True:
        rows = read_status(cfg, settings)
        if args.json:
            print(json.dumps(rows, indent=2), flush=True)
        else:
            if args.watch:
                print("\033[2J\033[H", end="")
            print(format_status(rows), flush=True)
        if not args.watch:
            return 0
        time.sleep(max(0.0, args.watch - 1.5))


def format_status(rows: list[dict]) -> str:
    """The human table of `streamlearn status`: queue, learner, then one line per actor."""
    lines = [
        f"{'model':<12} {'queue':>7} {'pending':>7} {'dead':>6} | {'version':>7} {'step':>8} "
        f"{'samples':>10} {'samples/s':>9} {'loss':>8} {'metric':>8}"
    ]
    for r in rows:
        rate = r.get("samples_per_s")
        lines.append(
            f"{r['model']:<12} {r['queue_length']:>7} {r['pending']:>7} {r['deadletters']:>6} | "
            f"{r.get('version', r['latest_version']):>7} {r.get('step', 0):>8} "
            f"{r.get('samples_seen', 0):>10} {fmt_number(rate, 0):>9} "
            f"{fmt_number(r.get('online_loss')):>8} {fmt_number(r.get('online_metric')):>8}"
        )
        lines += presence_lines(r)
        lines += _lease_lines(r)
        lines += served_line(r)
        lines += _fields_line(r)
        lines += versions.pin_lines(r)
        lines += _variant_lines(r)
        lines += [actor_line(a) for a in r.get("actors", [])]
    return "\n".join(lines + broker_lines(rows))


def _lease_lines(row: dict) -> list[str]:
    """Which learner holds each lease (one per variant), and which wait for it: a learner's
    presence marker names its token.

    >>> online = [{"id": "l-0", "lease": "h/7/ab"}, {"id": "l-1", "lease": "h/9/cd"}]
    >>> _lease_lines({"leases": {"base": {"holder": "h/7/ab", "left_s": 8.5}},
    ...     "learners_online": online})
    ['  lease: held by l-0 (h/7/ab), 8.5 s left; waiting: l-1']
    >>> _lease_lines({"leases": {"base": None}})
    ['  lease: free (no learner holds it)']
    """
    leases = row.get("leases") or {}
    lines = []
    for variant, held in leases.items():
        name = "lease" if len(leases) == 1 else f"lease {variant}"
        mine = [p for p in row.get("learners_online", []) if p.get("variant", "base") == variant]
        if held is None:
            lines.append(f"  {name}: free (no learner holds it)")
            continue
        holder = [p["id"] for p in mine if p.get("lease") == held["holder"]]
        who = f"{holder[0]} ({held['holder']})" if holder else held["holder"]
        line = f"  {name}: held by {who}, {fmt_number(held['left_s'], 1)} s left"
        waiting = [p["id"] for p in mine if p.get("lease") not in (None, held["holder"])]
        lines.append(line + (f"; waiting: {', '.join(waiting)}" if waiting else ""))
    return lines


def _fields_line(row: dict) -> list[str]:
    """What named payloads held besides their inputs, over every ingest process.

    >>> _fields_line({"fields": {"extra": 6000, "unlabeled": 12, "unseen": {"kind": 2},
    ...     "missing": {"rpm": 3, "vibration": 40}}})
    ['  fields: 6,000 extra ignored, 12 unlabeled; missing vibration 40, rpm 3; unseen kind 2']
    >>> _fields_line({"fields": {"extra": 0, "unlabeled": 0, "sources": {"tele/+/S": 5}}})[1]
    '  sources: tele/+/S 5 messages'
    """
    fields = row.get("fields")
    if not isinstance(fields, dict):
        return []
    sources = fields.get("sources") or {}
    received = ", ".join(f"{topic} {n:,} messages" for topic, n in sorted(sources.items()))
    lines = [f"  sources: {received}"] if received else []
    parts = [f"{fields.get('extra', 0):,} extra ignored, {fields.get('unlabeled', 0):,} unlabeled"]
    for kind in ("missing", "unseen"):
        counts = sorted((fields.get(kind) or {}).items(), key=lambda kv: (-kv[1], kv[0]))
        if counts:
            parts.append(f"{kind} " + ", ".join(f"{name} {n:,}" for name, n in counts))
    return ["  fields: " + "; ".join(parts), *lines]


def _variant_lines(row: dict) -> list[str]:
    """One line per variant, side by side, the champion marked with `*`."""
    variants = row.get("variants") or {}
    if not variants:
        return []
    metric = next((v.get("metric") for v in variants.values() if v.get("metric")), None)
    lines = [
        f"  {'variant':<14} {'version':>7} {'samples':>10} {'loss':>8} {'metric':>8} | "
        f"last {'N':>6} {'loss':>8} {metric or 'metric':>8}"
    ]
    for name, v in variants.items():
        mark = "*" if name == row.get("champion") else " "
        lines.append(
            f"{mark} {name:<14} {v.get('version', '-'):>7} {v.get('samples_seen', 0):>10} "
            f"{fmt_number(v.get('online_loss')):>8} {fmt_number(v.get('online_metric')):>8} | "
            f"     {v.get('window_samples') or 0:>6} {fmt_number(v.get('window_loss')):>8} "
            f"{fmt_number(v.get('window_metric')):>8}"
        )
    last = row.get("promotion")
    if last:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last.get("at", 0)))
        lines.append(
            f"  (* champion) last promotion: {last.get('champion')} over "
            f"{last.get('previous')} on {last.get('on')} at {when}"
        )
    else:
        lines.append("  (* champion) no promotion yet")
    return lines
