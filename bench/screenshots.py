"""The docs' pictures, taken from a real running stack: refreshes docs/images/*.png.

1. `dashboard.png`: `streamlearn up --demo` (its own broker and Redis), left to learn until
   the dashboard holds `--points` points (one a second) with a learner's version, then shot
   by headless Chromium.
2. `learning-curve.png`: `streamlearn init examples/machines.csv` and `streamlearn up` for
   its config, then `streamlearn evaluate examples/machines.csv --plot` against it (3,000
   rows at 400 samples/s).

Every process started here is stopped before it returns (Ctrl-C to `up`, which stops its
children). About two minutes on 2 cores.

    .venv/bin/python -m bench.screenshots
    .venv/bin/python -m bench.screenshots --only dashboard --points 30
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
MACHINES = ROOT / "examples" / "machines.csv"
WINDOW = (1280, 640)  # the demo model's panel, no empty page below
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


class Up:
    """`streamlearn up ...` as a user runs it, its output kept in `log`."""

    def __init__(self, work: Path, *flags: str) -> None:
        self.env = _user_env(work)
        self.log = work / "up.log"
        self._out = self.log.open("w")
        argv = [sys.executable, "-m", "streamlearn", "up", "--quiet", *flags]
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, env=self.env)

    def wait_for(self, pattern: str, timeout_s: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = re.search(pattern, self.log.read_text())
            if found:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"streamlearn up: no {pattern!r}; its output:\n{self.log.read_text()}")

    def stop(self) -> None:
        """Ctrl-C, as a user stops it; killed only if it has not stopped within a minute."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


@contextmanager
def running(work: Path, *flags: str) -> Iterator[Up]:
    up = Up(work, *flags)
    try:
        up.wait_for("Ctrl-C stops everything", 120)
        yield up
    finally:
        up.stop()


def dashboard(work: Path, points: int, out: Path) -> Path:
    """The demo stack's dashboard after `points` seconds of learning."""
    with running(work, "--demo", "--dashboard-port", "0") as up:
        url = up.wait_for(r"dashboard (http://\S+)", 10)[1]
        deadline = time.monotonic() + points + 120  # the learner's start comes first
        while _points(url) < points:
            if time.monotonic() > deadline:  # a picture of a stack that never learned: none
                raise RuntimeError(f"the demo learned {_points(url)} s, not {points} s")
            time.sleep(1)
        width, height = WINDOW
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if exe is None:
            raise SystemExit("bench.screenshots: chromium is needed (Debian's `chromium`)")
        subprocess.run(
            [
                exe,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={work / 'profile'}",
                f"--window-size={width},{height}",
                "--virtual-time-budget=5000",
                f"--screenshot={out}",
                url,
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )
    return out


def _points(url: str) -> int:
    """The fewest points with a learner's version any model's series holds: seconds learned
    (0 while the dashboard is unreachable). `url`: as `up` printed it, with its token."""
    page, _, token = url.partition("?")
    try:
        with urllib.request.urlopen(f"{page}api/series?{token}", timeout=5) as reply:
            series = json.load(reply)["models"]
    except OSError:
        return 0
    learned = (sum(p.get("version") is not None for p in points) for points in series.values())
    return min(learned, default=0)


def learning_curve(work: Path, out: Path) -> Path:
    """`streamlearn evaluate --plot` of examples/machines.csv through a fresh service."""
    config = work / "streamlearn.toml"
    cli = [sys.executable, "-m", "streamlearn"]
    env = _user_env(work)
    subprocess.run([*cli, "init", str(MACHINES), "--output", str(config)], env=env, check=True)
    with running(work, "--config", str(config), "--no-dashboard"):
        status = [*cli, "status", "--config", str(config), "--json"]
        deadline = time.monotonic() + 120
        while not _serving(status, env) and time.monotonic() < deadline:
            time.sleep(1)
        subprocess.run(
            [*cli, "evaluate", "--config", str(config), str(MACHINES), "--plot", str(out)],
            env=env,
            check=True,
            timeout=300,
        )
    return out


def _serving(status: list[str], env: dict[str, str]) -> bool:
    """An actor serves a version, as `up`'s live line shows: when a user starts evaluating."""
    done = subprocess.run(status, env=env, capture_output=True, text=True, timeout=60)
    try:
        rows = json.loads(done.stdout)
    except json.JSONDecodeError:
        return False
    return bool(rows) and any(a.get("version", 0) >= 1 for a in rows[0]["actors"])


def _user_env(work: Path) -> dict[str, str]:
    """A shell with no STREAMLEARN_ URL: the tools find `up` by its run file under `work`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEARN_")}
    env["PYTHONPATH"] = str(ROOT)
    env["XDG_STATE_HOME"] = str(work / "state")
    env["STREAMLEARN_STACK_FILE"] = str(work / "stack.json")
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.screenshots", description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["dashboard", "curve"], help="take one picture")
    parser.add_argument("--points", type=int, default=60, help="dashboard: seconds of learning")
    parser.add_argument("--out", type=Path, default=IMAGES, help="folder (default docs/images)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if args.only in (None, "dashboard"):
        with tempfile.TemporaryDirectory(prefix="screenshots-") as tmp:
            path = dashboard(Path(tmp), args.points, args.out / "dashboard.png")
            print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB)", flush=True)
    if args.only in (None, "curve"):
        with tempfile.TemporaryDirectory(prefix="screenshots-") as tmp:
            path = learning_curve(Path(tmp), args.out / "learning-curve.png")
            print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KB)", flush=True)
    print(f"{time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
