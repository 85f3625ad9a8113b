"""The quick start page, run as written: from a CSV file to a judged, served model.

The commands are read from docs/getting-started/quickstart.md, not copied here, so the
test fails when the page says something that does not work (tests/unit/test_readme.py
holds the README's three steps to the page's). They run as a user would
run them: in a fresh directory holding `examples/` and the `.venv` that runs these tests,
with no STREAMLEARN_* URL in the environment, `up` in the first shell and the rest in a
second shell that finds the stack through `up`'s run file.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from streamlearn.config import runfile
from tests.conftest import ROOT, eventually
from tests.integration.test_up import alive, children_of

QUICKSTART = ROOT / "docs" / "getting-started" / "quickstart.md"


def quick_start() -> tuple[list[list[list[str]]], dict]:
    """The page's two shells, each a list of commands (argv lists), and the reply it shows.

    The first shell's blocks end with the one that runs `up`; every later block is typed
    in the second shell.
    """
    page = QUICKSTART.read_text(encoding="utf-8")
    blocks = [
        [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
        for block in re.findall(r"```sh\n(.*?)```", page, re.S)
    ]
    ups = [i for i, block in enumerate(blocks) if block[-1][1:2] == ["up"]]
    assert len(ups) == 1, "one block starts the stack"
    first = [argv for block in blocks[: ups[0] + 1] for argv in block]
    second = [argv for block in blocks[ups[0] + 1 :] for argv in block]
    shown = re.findall(r"```json\n(.*?)```", page, re.S)
    assert shown, "the page shows predict's reply"
    return [first, second], json.loads(shown[0])


def test_the_quick_start_runs_as_written(tmp_path: Path):
    (first, second), shown = quick_start()
    home = tmp_path / "user"
    home.mkdir()
    (home / ".venv").symlink_to(Path(sys.executable).parent.parent)  # the tests' own venv
    (home / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEARN_")}
    env |= {runfile.FILE_ENV: str(tmp_path / "stack.json"), "XDG_STATE_HOME": str(tmp_path)}

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=180)
        said = f"{shlex.join(argv)}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        assert done.returncode == 0, said
        return done

    *setup, up_argv = first
    assert up_argv[1:2] == ["up"], "the first shell ends by starting the stack"
    for argv in setup:
        run(argv)
    config = (home / "streamlearn.toml").read_text()
    named = 'inputs = ["temperature", "vibration", "rpm", "load"]'
    assert named in config and 'task = "binary"' in config, config[:2000]

    up = subprocess.Popen(
        up_argv, cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    children: set[int] = set()
    try:
        eventually(lambda: runfile.live(tmp_path / "stack.json") is not None, 90, "up's run file")
        children = children_of(up.pid)

        def serving() -> bool:  # the user waits for up's live line: an actor, a version
            rows = json.loads(run([*second[-1], "--json"]).stdout)  # the block's `status`
            if not rows or rows[0]["learner_state"] != "online":  # at its pace: traced
                return False
            return any(a.get("version", 0) >= 1 for a in rows[0]["actors"])

        eventually(serving, 120, "the model served, as up's live line shows")
        outputs = {argv[1]: run(argv) for argv in second}
    finally:
        children |= children_of(up.pid) if up.poll() is None else set()
        up.send_signal(signal.SIGINT)
        code = up.wait(60)
    assert code == 0
    assert not [pid for pid in children if alive(pid)], "up left a process behind"

    record = f"using the stack of streamlearn up (pid {up.pid})"
    assert all(record in done.stderr for done in outputs.values()), {
        k: v.stderr[-500:] for k, v in outputs.items()
    }
    evaluated = outputs["evaluate"].stdout
    accuracy = re.search(r"served accuracy\D*?([01]\.\d+)", evaluated)
    assert accuracy and float(accuracy[1]) > 0.8, evaluated  # a logistic fit gets ~0.91
    # the labels came 50 rows late, alone: the service joined them and scored what it served
    service = re.search(
        r"service's served score: ([\d,]+) labels joined, accuracy ([01]\.\d+)", evaluated
    )
    rows = len((ROOT / "examples" / "machines.csv").read_text().splitlines()) - 1
    assert service and int(service[1].replace(",", "")) == rows, evaluated
    assert abs(float(service[2]) - float(accuracy[1])) < 0.01, evaluated
    reply = json.loads(outputs["predict"].stdout)
    assert reply["model"] == "machines" and reply["y"] > 0.8, reply  # the page: y near 1
    same = ("id", "model", "variant")  # the reply as the page shows it, but y and the version
    assert reply.keys() == shown.keys(), (reply, shown)
    assert [reply[k] for k in same] == [shown[k] for k in same], (reply, shown)
    assert "machines" in outputs["status"].stdout
