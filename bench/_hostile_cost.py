"""What a hostile request costs the actor against a valid one, measured in one run.

    .venv/bin/python -m bench.hostile            # the full run (best of 30 per request)
    .venv/bin/python -m bench.hostile --quick    # the CI smoke: best of 5, half of the goal

Then the HTTP rows (`bench._hostile_http`): what a hostile HTTP client costs legitimate MQTT
traffic and the actor's memory, on a real actor; and the shares' rows
(`bench._hostile_shares`): what one device's flood of a shared pool costs another device,
on real ingest and actor processes (`--http-seconds 0` skips both).

For a model with named inputs and a positional one (4 inputs each), the actor's own path:
`Admission.admit` (size, width and nesting checks, the decode, the validation, the error
reply's encoding) and, for the valid request, its forward pass (compiled, as the actor
serves) and its reply. Hostile requests are about 1 MiB, just under `max_payload_bytes`:
80,000 made-up fields, 500,000 levels of nesting, a list of 500,000 numbers, a number of
1,000,000 digits, an unterminated string of escaped quotes inside 20 lists (a regular
expression once took minutes over it). Each must be answered with an error, at most
`GOAL` times a valid request's cost (each side the best of its passes, interleaved, so both
see the same machine). Nothing is published: the reply is encoded and handed to a stub.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from bench._report import exit_status, goal, report
from streamlearn.config import ModelConfig

GOAL = 5.0  # a hostile request costs at most this many valid ones
LIMIT = 1_048_576  # max_payload_bytes's default


def _requests(named: bool) -> dict[str, bytes]:
    """The valid request and the hostile ones, each under `LIMIT` bytes."""
    head = b'"t":20.5,"p":3,"q":1,"r":0.5' if named else b'"x":[20.5,3,1,0.5]'
    keys = b",".join(b'"%08x":0' % i for i in range(80_000))
    depth = (LIMIT - 64) // 2
    nest = b'"t":' if named else b'"x":'
    return {
        "valid": b'{"id":"r1",' + head + b"}",
        "80,000 unknown keys": b'{"id":"r1",' + head + b"," + keys + b"}",
        "nesting 500,000 deep": b'{"id":"r1",' + nest + b"[" * depth + b"]" * depth + b"}",
        "list of 500,000 numbers": b'{"id":"r1",' + nest + b"[" + b"0," * 500_000 + b"0]}",
        "number of 1,000,000 digits": b'{"id":"r1",' + nest + b"1" * 1_000_000 + b"}",
        "unterminated string of escaped quotes": b'{"id":"r1",'
        + nest
        + b"[" * 20
        + b'"'
        + b'\\"' * ((LIMIT - 64) // 2),
    }


def _model(named: bool) -> ModelConfig:
    if named:
        return ModelConfig(name="named", inputs=["t", "p", "q", "r"], target="y", task="binary")
    return ModelConfig(name="positional", inputs=4, task="binary")


def _server(cfg: ModelConfig) -> tuple[Callable[[bytes], str | None], list[bytes]]:
    """The actor's path for one request (admission, forward pass, reply) and the replies."""
    from streamlearn.actor.inbox import Admission, Arrival
    from streamlearn.actor.replies import Replier, ReplyRoutes
    from streamlearn.contract.names import Names
    from streamlearn.nn import networks
    from streamlearn.online.forward import Forward

    sent: list[bytes] = []
    replier = Replier(lambda _t, payload, *_a: sent.append(payload), cfg.name, 1_048_576)
    names = Names(cfg.name)
    admission = Admission(cfg, ReplyRoutes(names), replier)
    forward = Forward(networks.build_model(cfg), cfg.sample_shape)
    topic = f"{names.predict_topic}/bench"

    def serve(payload: bytes) -> str | None:
        now = time.monotonic()
        arrival = Arrival(topic, payload, b"c", None, now, now + 60, len(payload))
        pending = admission.admit(arrival)
        if pending is None:
            return "error"
        y = forward(pending.x)
        replier.send(pending.topic, pending.correlation, {"id": pending.id, "y": y[0].tolist()})
        return None

    return serve, sent


def measure(
    passes: int, quick: bool = False
) -> tuple[list[dict], dict[str, bool], dict[str, float]]:
    rows: list[dict] = []
    checks: dict[str, bool] = {}
    figures: dict[str, float] = {}
    for named in (True, False):
        cfg = _model(named)
        serve, sent = _server(cfg)
        requests = _requests(named)
        best = dict.fromkeys(requests, np.inf)
        outcome: dict[str, bytes] = {}
        for _ in range(3):  # warm up: the first forward passes
            serve(requests["valid"])
        for _ in range(passes):
            for name, payload in requests.items():
                start = time.perf_counter()
                serve(payload)
                best[name] = min(best[name], time.perf_counter() - start)
                outcome[name] = sent[-1]
                sent.clear()
        valid = best["valid"]
        for name in requests:
            ratio = best[name] / valid
            reply = outcome[name].decode()
            refused = '"error"' in reply
            ok = name == "valid" or (refused and goal(1 / ratio, 1 / GOAL, quick))
            rows.append(
                {
                    "model": cfg.name,
                    "request": name,
                    "bytes": len(requests[name]),
                    "best_ms": 1000 * best[name],
                    "x_valid": ratio,
                    "reply": reply[:90],
                    "verdict": "PASS" if ok else "FAIL",
                }
            )
            if name != "valid":
                label = f"{cfg.name}: {name} answered with an error, <= {GOAL:g}x a valid request"
                checks[label] = ok
                figures[f"{cfg.name}: {name} x valid"] = round(ratio, 2)
    return rows, checks, figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.hostile", description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=int, default=30, help="passes over the requests")
    parser.add_argument("--quick", action="store_true", help="CI smoke: 5 passes, half the goal")
    parser.add_argument(
        "--http-seconds",
        type=float,
        default=4.0,
        help="legitimate load per run of the HTTP rows (bench._hostile_http); 0: skip them",
    )
    args = parser.parse_args(argv)
    passes = 5 if args.quick else args.passes
    rows, checks, figures = measure(passes, args.quick)
    report("hostile", rows, checks, quick=args.quick, figures=figures, passes=passes, goal=GOAL)
    if args.http_seconds > 0:
        http_rows, http_checks, http_figures = _http_rows(args.http_seconds)
        report("hostile_http", http_rows, http_checks, quick=args.quick, figures=http_figures)
        checks |= http_checks
        from bench import _hostile_shares

        share_rows, share_checks, _ = _hostile_shares.measure()
        report("hostile_shares", share_rows, share_checks, quick=args.quick)
        checks |= share_checks
    return exit_status(checks)


def _http_rows(seconds: float) -> tuple[list[dict], dict[str, bool], dict[str, float]]:
    """The HTTP rows on a real actor, broker and Redis of their own."""
    import tempfile
    from pathlib import Path

    from bench import _hostile_http
    from bench._stack import Stack, broker
    from streamlearn.stack import embedded

    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        work = Path(tmp)
        with (
            broker(work / "mqtt", nagle=False) as mqtt,
            embedded.redis_server(workdir=work / "redis") as store,
        ):
            return _hostile_http.measure(Stack(mqtt.port, store.port, work), seconds)
