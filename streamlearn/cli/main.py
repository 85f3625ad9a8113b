"""The `streamlearn` command: `up`, the roles, and the client tools.

It imports the service's modules (pydantic, numpy, Redis, Keras) only in the commands that
need them, so that the base install (`pip install streamlearn`, paho only) has a command
whose `--help` and `--version` work, and a command that needs the service says so in one
line (`SERVICE_EXTRA`, exit 2), not in a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from streamlearn.cli import light, publish, target
from streamlearn.config import runfile
from streamlearn.errors import ConfigError, StreamlearnError

if TYPE_CHECKING:
    from streamlearn.client.client import Client
    from streamlearn.config.app import ModelConfig

ROLES = ("ingest", "learner", "actor")
TOOLS = (
    ("versions", "export pin unpin"),
    ("scaffold", "init"),
    ("evaluate", "evaluate"),
    ("deploy", "deploy"),
)
SERVICE_EXTRA = "this command needs the service extra: pip install 'streamlearn[service]'"
# What the service extra installs, by import name: a command missing one needs the extra.
SERVICE_MODULES = frozenset(
    {"pydantic", "pydantic_settings", "numpy", "redis", "keras", "tensorflow", "prometheus_client"}
)


BENCHES = (
    "ingest learner serve soak hostile device mutants quality coldstart startup scaling multiworker"
)
# A command line of each command, as the commands reference shows it (docs/gen_reference.py);
# tests/unit/test_reference_examples.py parses each with the parser below.
EXAMPLES = {
    "up": "streamlearn up --demo --data-dir ./state",
    "ingest": "streamlearn ingest --config streamlearn.toml --model machines",
    "learner": "streamlearn learner --model machines --variant wide",
    "actor": "streamlearn actor --model machines --instance actor-1",
    "publish": "streamlearn publish examples/machines.csv --rate 200 --batch 10",
    "predict": "streamlearn predict --model machines --id m1-0915 '[88.0, 6.1, 1500, 0.9]'",
    "bench": "streamlearn bench serve",
    "status": "streamlearn status --watch",
    "export": "streamlearn export --model machines --version 40 --output m.keras",
    "pin": "streamlearn pin --model machines --version 40",
    "unpin": "streamlearn unpin --model machines",
    "init": "streamlearn init examples/machines.csv --target y",
    "evaluate": "streamlearn evaluate examples/machines.csv --label-delay 50",
    "deploy": "streamlearn deploy k8s --config streamlearn.toml --broker --redis --out k8s/",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ROLES:
        return _guard(
            lambda: importlib.import_module(f"streamlearn.{argv[0]}.worker").main(argv[1:])
        )
    args = _parser().parse_args(argv)
    return _guard(lambda: args.func(args))


def version() -> str:
    """The installed distribution's version (a source tree run in place: "unknown")."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("streamlearn")
    except PackageNotFoundError:
        return "unknown"


def service_missing() -> str | None:
    """The first module of the service extra this install lacks, or None."""
    from importlib.util import find_spec

    return next((m for m in sorted(SERVICE_MODULES) if find_spec(m) is None), None)


def _needs_service(_args: argparse.Namespace | None = None) -> int:
    print(f"streamlearn: {SERVICE_EXTRA}", file=sys.stderr)
    return 2


def _guard(func) -> int:
    try:
        return int(func() or 0)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in SERVICE_MODULES:
            raise
        return _needs_service()
    except ConfigError as exc:
        print(f"streamlearn: configuration error: {_said(exc)}", file=sys.stderr)
        return 2
    except StreamlearnError as exc:
        print(f"streamlearn: {_said(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # Redis unreachable or refusing: one line, not a traceback
        redis = sys.modules.get("redis")
        if redis is None or not isinstance(exc, redis.RedisError):
            raise
        print(f"streamlearn: Redis: {_said(exc)}", file=sys.stderr)
        return 1


def _said(exc: Exception) -> str:
    """An error as one line: no password of a URL in it, control characters (a newline or a
    terminal escape in a file name or a cell) escaped.

    >>> _said(ConfigError("bad port in 'mqtt://u:pw@h:x'\\n\\x1b[2J"))
    "bad port in 'mqtt://u:***@h:x'\\\\n\\\\x1b[2J"
    """
    text = runfile.redact_text(str(exc))
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: m[0].encode("unicode_escape").decode(), text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamlearn", description=__doc__.splitlines()[0].rstrip(".")
    )
    parser.add_argument("--version", action="version", version=f"streamlearn {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    base_only = service_missing() is not None

    def command(name: str, help: str, func) -> argparse.ArgumentParser:
        described = f"{help}. With this install, {SERVICE_EXTRA}." if base_only else help
        p = sub.add_parser(name, help=help, description=described)
        p.add_argument(
            "--config", help="streamlearn.toml (default: ./streamlearn.toml or the demo)"
        )
        p.set_defaults(func=func)
        return p

    up = command("up", "run the whole stack on this machine", _up)
    up.add_argument("--demo", action="store_true", help="also stream demo samples to every model")
    up.add_argument("--demo-rate", type=float, default=500, help="demo samples/s per model")
    up.add_argument("--quiet", action="store_true", help="no live summary line")
    up.add_argument(
        "--data-dir",
        help="keep the embedded servers' data here across restarts (Redis AOF fsynced every "
        "second, the broker saved every second); without it nothing is kept when up stops",
    )
    up.add_argument(
        "--dashboard-port", type=int, help="live dashboard on localhost (default 8321, or any free)"
    )
    up.add_argument("--no-dashboard", action="store_true", help="start no dashboard")
    up.add_argument(
        "--metrics-port",
        type=int,
        help="Prometheus /metrics: the first child's port, the next ones count up "
        "(0: free ports; default $STREAMLEARN_METRICS_PORT, else off)",
    )
    up.add_argument(
        "--runs-dir",
        help="where run directories of worker logs go "
        "(default $STREAMLEARN_RUNS_DIR, else $XDG_STATE_HOME/streamlearn/runs)",
    )
    up.add_argument("--keep-runs", type=int, default=5, help="run directories kept (default 5)")

    for role in ROLES:
        sub.add_parser(role, help=f"run one {role} process (see `streamlearn {role} --help`)")

    pub = command(
        "publish",
        "stream samples from a CSV/NDJSON file or the demo",
        lambda args: publish.run(args, _target),
    )
    pub.add_argument(
        "file",
        nargs="?",
        help="CSV (header with the label column; named inputs: a column per field) or NDJSON",
    )
    pub.add_argument("--model", help="model name (default: the only model)")
    pub.add_argument("--demo", action="store_true", help="a learnable synthetic stream")
    pub.add_argument("--count", type=int, default=None, help="samples to send (demo: forever)")
    pub.add_argument("--rate", type=float, default=0, help="samples/s, 0 = as fast as possible")
    pub.add_argument("--batch", type=int, default=1, help="samples per message")

    pred = command("predict", "send one prediction request and print the reply", _predict)
    pred.add_argument("--model", help="model name (default: the only model)")
    pred.add_argument(
        "x",
        nargs="?",
        help="""JSON list, e.g. '[0.1, 0.2, ...]', or named fields '{"temperature": 88.0, ...}' """
        "(default: a demo x)",
    )
    pred.add_argument("--id", help="the request's id: a label published later joins it")
    pred.add_argument("--key", help="a device key: x is its newest observation (windowed models)")
    pred.add_argument("--seq", type=float, help="with --key: the observation's sequence number")
    pred.add_argument(
        "--client-id",
        help="ask as this client id: a device's own, or a gateway's that [models.NAME.gateways] "
        "lets name other keys (with an account in the URL: its username)",
    )
    pred.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the reply")

    bench = sub.add_parser("bench", help="run a benchmark of the source tree's bench/")
    bench.add_argument("name", choices=BENCHES.split(), help="the benchmark: bench/NAME.py")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="passed to the benchmark")
    bench.set_defaults(func=_bench)

    st = command("status", "show each model's queue, learner and weights", _status)
    st.add_argument("--json", action="store_true", help="machine-readable rows")
    st.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=2.0,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2)",
    )
    for module, names in TOOLS:
        try:
            tool = importlib.import_module(f"streamlearn.cli.{module}")
        except ModuleNotFoundError:  # the base install: each says what to install
            for name in names.split():
                stub = sub.add_parser(name, help="(needs streamlearn[service])", add_help=False)
                stub.add_argument("rest", nargs=argparse.REMAINDER)
                stub.set_defaults(func=_needs_service)
            continue
        if module == "versions":
            tool.add_commands(command)  # export, pin, unpin
        else:
            tool.add_command(sub)  # init; evaluate FILE; deploy k8s: a cluster's manifests
    return parser


# -- up ----------------------------------------------------------------------------------


def _up(args: argparse.Namespace) -> int:
    from streamlearn.config.loading import load_config
    from streamlearn.config.settings import load_settings
    from streamlearn.stack import runlog
    from streamlearn.stack.supervisor import DEFAULT_DASHBOARD_PORT, Stack

    cfg = load_config(args.config)
    settings = load_settings()
    for flag in ("dashboard_port", "metrics_port"):
        port = getattr(args, flag)
        if port is not None and not 0 <= port <= 65535:
            raise ConfigError(f"--{flag.replace('_', '-')} must be 0..65535, got {port}")
    if args.keep_runs < 1:
        raise ConfigError(f"--keep-runs must be >= 1, got {args.keep_runs}")
    root = Path(args.runs_dir) if args.runs_dir else runlog.runs_root()
    stack = Stack(
        cfg,
        settings,
        run_dir=runlog.new_run_dir(root, keep=args.keep_runs),
        config_path=_config_path(args.config),
        data_dir=args.data_dir,
        demo_rate=args.demo_rate if args.demo else None,
        dashboard_port=None
        if args.no_dashboard
        else (args.dashboard_port if args.dashboard_port is not None else DEFAULT_DASHBOARD_PORT),
        metrics_port=args.metrics_port if args.metrics_port is not None else settings.metrics_port,
    )
    return stack.run(quiet=args.quiet)


def _config_path(given: str | None) -> str | None:
    if given:
        return given
    return "streamlearn.toml" if Path("streamlearn.toml").exists() else None


# -- client tools ------------------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:
    from streamlearn.cli import status

    return status.run(args)


def _target(args: argparse.Namespace) -> tuple[ModelConfig | target.LightModel, Client]:
    return target.target(args, service_missing() is None)


def _bench(args: argparse.Namespace) -> int:
    import subprocess

    root = Path(__file__).resolve().parents[2]
    if not (root / "bench" / f"{args.name}.py").exists():
        raise StreamlearnError("benchmarks ship with the source repository (bench/), not the wheel")
    cmd = [sys.executable, "-m", f"bench.{args.name}", *args.args]
    return subprocess.run(cmd, cwd=root).returncode


def _predict(args: argparse.Namespace) -> int:
    if args.seq is not None and args.key is None:
        raise ConfigError("--seq needs --key")
    if args.key is not None and not args.x:
        raise ConfigError("--key needs x, the device's newest observation")
    model, client = _target(args)
    x = light.request_x(args.x, model)
    body: dict = dict(x) if isinstance(x, dict) else {"x": x}
    if isinstance(x, dict) and args.key is not None:
        raise ConfigError("--key goes with a positional x, not named fields")
    for flag in ("key", "seq", "id"):
        if getattr(args, flag) is not None:
            body[flag] = getattr(args, flag)
    with client:
        try:
            reply = client.request(model.name, body, timeout=args.timeout)
        except TimeoutError:
            raise StreamlearnError(
                f"no reply within {args.timeout} s: is an actor running?"
            ) from None
    print(json.dumps(reply))
    return 0 if "error" not in reply else 1


if __name__ == "__main__":
    raise SystemExit(main())
