"""Pages of the documentation run as written: what the tests of the quick start and of the
recipes share.

A page is read in order, fence by fence. A ```sh block holds commands, one a line (a
line ending in `\\` goes on); a block with a title (```python title="plugs.py") is a file
the page has the user save under that name, written when the page comes to it; a ```json
or ```text block right after a ```sh block shows what that block's last command prints.
The one command that runs `streamlearn up` splits the page into two shells: what comes
before it is typed in the first, what comes after in the second, as a user with the stack
running in one terminal would.

`Shells` runs them in a fresh home directory holding `examples/` and the `.venv` that runs
the tests, with no STREAMLEARN_* URL in the environment, so the second shell finds the
stack the way a user's does: through `up`'s run file.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamlearn.config import runfile
from tests.conftest import ROOT, eventually
from tests.integration.test_up import alive, process_tree

FENCE = re.compile(r'^```(\w+)(?:[ \t]+title="([^"]+)")?[ \t]*\n(.*?)^```[ \t]*$', re.M | re.S)
OUTPUTS = ("json", "text")  # blocks that show what the command before them printed


@dataclass
class Step:
    """One thing the user does: type `command`, or save `text` as the file `save`; and what
    the page shows the command printing (`shown`: (language, text) blocks)."""

    command: str | None = None
    save: str | None = None
    text: str = ""
    shown: list[tuple[str, str]] = field(default_factory=list)

    @property
    def words(self) -> list[str]:
        return shlex.split(self.command or "", comments=True)


@dataclass(frozen=True)
class Page:
    first: list[Step]  # typed in the first shell, before `up`
    up: list[str]  # the command that starts the stack, as argv
    second: list[Step]  # once the stack runs, in a second shell


def commands(block: str) -> list[str]:
    """A ```sh block's commands: one a line, a line ending in a backslash going on."""
    found, pending = [], ""
    for line in block.splitlines():
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending.strip():
            found.append(pending.strip())
        pending = ""
    assert not pending.strip(), f"a command ends in a backslash: {pending!r}"
    return found


def read(path: Path) -> Page:
    """The page's steps, split at the one command that starts the stack."""
    steps: list[Step] = []
    last_sh: Step | None = None  # the last command of the latest ```sh block
    for lang, title, text in FENCE.findall(path.read_text(encoding="utf-8")):
        if title:
            steps.append(Step(save=title, text=text))
            last_sh = None
        elif lang == "sh":
            steps += [Step(command=c) for c in commands(text)]
            last_sh = steps[-1]
        elif lang in OUTPUTS and last_sh is not None:
            last_sh.shown.append((lang, text))
        else:
            last_sh = None
    ups = [i for i, s in enumerate(steps) if s.words[1:2] == ["up"]]
    assert len(ups) == 1, f"{path}: one command starts the stack, found {len(ups)}"
    return Page(steps[: ups[0]], steps[ups[0]].words, steps[ups[0] + 1 :])


def config_args(argv: list[str]) -> list[str]:
    """The `--config FILE` of a command, to be given to the others that need it."""
    if "--config" in argv:
        return ["--config", argv[argv.index("--config") + 1]]
    return [a for a in argv if a.startswith("--config=")]


class Shells:
    """A user's home directory and the environment of the shells typed into it."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "user"
        self.home.mkdir()
        (self.home / ".venv").symlink_to(Path(sys.executable).parent.parent)  # the tests' own
        (self.home / "examples").symlink_to(ROOT / "examples")
        self.stack_file = tmp_path / "stack.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLEARN_")}
        self.env = env | {runfile.FILE_ENV: str(self.stack_file), "XDG_STATE_HOME": str(tmp_path)}
        self.done: list[tuple[Step, subprocess.CompletedProcess[str]]] = []
        self.up: subprocess.Popen[bytes] | None = None
        self.before_up = 0  # commands done before the stack started

    def run(self, command: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """`command` typed in a shell (bash); it must succeed."""
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        said = f"{command}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        assert done.returncode == 0, said
        return done

    def take(self, step: Step) -> None:
        """Do what the step says: save its file, or run its command (kept in `done`)."""
        if step.save is not None:
            (self.home / step.save).write_text(step.text, encoding="utf-8")
        else:
            assert step.command is not None
            done = self.run(step.command)
            print(f"$ {step.command}\n{done.stdout[-3000:]}")  # shown when a test fails
            self.done.append((step, done))

    def output(self, word: str) -> subprocess.CompletedProcess[str]:
        """What the last command with `word` among its words printed."""
        said = [done for step, done in self.done if word in step.words]
        assert said, f"no command with {word!r} ran"
        return said[-1]

    def status(self, argv: list[str]) -> list[dict[str, Any]]:
        """`streamlearn status --json` with the config `argv` (the `up` command) names."""
        cmd = shlex.join([".venv/bin/streamlearn", "status", "--json", *config_args(argv)])
        return json.loads(self.run(cmd).stdout)

    @contextmanager
    def stack(self, argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
        """`up` running in the first shell, for as long as the block runs; then Ctrl-C,
        after which it must have exited cleanly and left no process behind."""
        up = subprocess.Popen(
            argv, cwd=self.home, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.up, self.before_up = up, len(self.done)
        children: set[int] = set()
        try:
            eventually(lambda: runfile.live(self.stack_file) is not None, 90, "up's run file")
            children = process_tree(up.pid) - {up.pid}
            yield up
        finally:
            children |= process_tree(up.pid) - {up.pid} if up.poll() is None else set()
            up.send_signal(signal.SIGINT)
            code = up.wait(60)
        assert code == 0
        assert not [pid for pid in children if alive(pid)], "up left a process behind"

    def serving(self, argv: list[str]) -> None:
        """Wait for what up's live line shows once the model serves: the learner online,
        an actor answering with a version."""

        def ready() -> bool:
            rows = self.status(argv)
            if not rows or rows[0]["learner_state"] != "online":  # at its pace: traced
                return False
            return any(a.get("version", 0) >= 1 for a in rows[0]["actors"])

        eventually(ready, 120, "the model served, as up's live line shows")

    def learned(self, argv: list[str], samples: int) -> None:
        """Wait until the live line shows `samples` seen by the learner, and the actors
        serving its newest version (which a loaded machine may take a while to reach)."""

        def seen() -> bool:
            row = self.status(argv)[0]
            newest, actors = row["latest_version"], row["actors"]
            return (
                row.get("samples_seen", 0) >= samples
                and bool(actors)
                and all(a.get("version", 0) >= newest for a in actors)
            )

        eventually(seen, 120, f"{samples} samples learned and served, as up's live line shows")

    def from_the_stack(self) -> None:
        """Every client tool of the second shell said it used the stack of `up`, found
        through its run file."""
        assert self.up is not None
        record = f"using the stack of streamlearn up (pid {self.up.pid})"
        tools = [
            (step.command, done.stderr[-500:])
            for step, done in self.done[self.before_up :]
            if step.words[0].endswith("streamlearn")
        ]
        assert all(record in said for _, said in tools), tools


def matches_shown(lang: str, shown: str, printed: str) -> None:
    """What a command printed has the form the page shows: a JSON reply with the same
    fields (and the same words among their values), or text whose every shown line is
    there with other numbers."""
    if lang == "json":
        reply, page = json.loads(printed), json.loads(shown)
        assert reply.keys() == page.keys(), (reply, page)
        words = [k for k, v in page.items() if isinstance(v, str) or v is None]
        assert [reply[k] for k in words] == [page[k] for k in words], (reply, page)
        return
    for line in shown.strip().splitlines():
        assert re.search(shape(line), printed, re.M), f"{line!r} not in:\n{printed}"


NUMBER = r"-?[\d,]*\.?\d+(?:e[-+]?\d+)?"


def shape(line: str) -> str:
    """A pattern for a shown line: its words as they are, any number for a number, any
    run of blanks for a run of blanks.

    >>> bool(re.search(shape("MAE 1.25 over 2,000 samples"), "MAE 3.5   over 1,999 samples"))
    True
    """
    parts = re.split(rf"({NUMBER}|\s+)", line.strip())
    pattern = []
    for part in parts:
        if not part:
            continue
        if part.isspace():
            pattern.append(r"\s+")
        elif re.fullmatch(NUMBER, part):
            pattern.append(NUMBER)
        else:
            pattern.append(re.escape(part))
    return "".join(pattern)
