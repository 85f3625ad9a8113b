"""Mutation check of the test suite: plant one named fault, see the tests that guard it fail.

Each mutant breaks one guarantee of the contract (docs/contract.md §4) or a promise of the
docs by a text substitution in one file of a copy of the repository (tracked and
untracked-but-not-ignored files, as they are now), then runs
the tests that must catch it there, with this interpreter and the copy first on the path.
An unmutated copy runs every listed test first: they must pass, or no verdict means much.

    python -m bench.mutants                 # every mutant; table + bench/results/mutants.json
    python -m bench.mutants --only trim_off padding_off
    python -m bench.mutants --list
    python -m bench.mutants --check         # only: does every anchor still apply? (seconds)

A mutant's "tests" may also be a benchmark's smoke run, `python -m bench.NAME --quick`
(a planted slowdown is caught by the bench, not by a test): it counts as failed when it
exits 1 (a FAIL line).

Exit status 1 when a mutant survives, an anchor is missing (the code moved: re-anchor it
here), or the unmutated tests fail. Anchors are small snippets, each expected exactly once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench._report import report

ROOT = Path(__file__).resolve().parents[1]
G = "tests/integration/test_guarantees.py::"
SMOKE = "python -m bench."  # a "test" that is a benchmark's smoke run


Sub = tuple[str, str]  # (anchor, replacement)


@dataclass(frozen=True)
class Mutant:
    """`edits`: each a (anchor, replacement) or a tuple of such alternatives (the code as
    it was and as it is now), of which the first whose anchor is found exactly once counts."""

    name: str
    file: str
    edits: tuple[Sub | tuple[Sub, ...], ...]
    tests: tuple[str, ...]
    breaks: str


MUTANTS = (
    Mutant(
        "ack_before_write",
        "streamlearn/ingest/inbox.py",
        (
            (
                "        self._messages.append(\n",
                "        client.ack_many([(client.generation, msg.mid)])\n"
                "        self._messages.append(\n",
            ),
        ),
        (
            G + "test_ingest_killed_while_redis_refuses_writes_loses_no_sample",
            G + "test_ingest_killed_while_holding_back_loses_no_sample",
        ),
        "ingest acknowledges each message on arrival, before it is in Redis",
    ),
    Mutant(
        "ack_before_write_loop",
        "streamlearn/ingest/loop.py",
        (
            (
                "measure = self._measure_due(adding)",
                "self.inbox.acknowledge(batch)\nmeasure = self._measure_due(adding)",
            ),
        ),
        (G + "test_ingest_killed_while_redis_refuses_writes_loses_no_sample",),
        "ingest acknowledges a run of messages before writing it",
    ),
    Mutant(
        "ack_before_durable",
        "streamlearn/learner/loop.py",
        (
            (
                ("self.writes.unacked += batch.done", "self.queue.ack(batch.done)"),
                ("self._unacked += batch.done", "self.queue.ack(batch.done)"),
            ),
        ),
        (G + "test_learner_acknowledges_entries_only_once_their_state_is_durable",),
        "the learner acknowledges entries right after the step, before a checkpoint/publish",
    ),
    Mutant(
        "dedupe_off",
        "streamlearn/store/lua/stream_append.lua",
        (
            (
                "if hit == 1 then known[named[i + j - 1]], dedup = true, true end",
                "if hit == 2 then known[named[i + j - 1]], dedup = true, true end",
            ),
        ),
        (G + "test_a_redelivered_or_repeated_id_is_stored_once",),
        "ingest stores a redelivered sample id again",
    ),
    Mutant(
        "trim_off",
        "streamlearn/store/stream.py",
        (("self.redis.xtrim(self.key, minid=", "(lambda *a, **k: None)(self.key, minid="),),
        (G + "test_the_stream_gets_shorter_but_never_below_a_lagging_group",),
        "the stream is never trimmed",
    ),
    Mutant(
        "trim_past_lagging_group",
        "streamlearn/store/stream.py",
        (("floor = min(floors)", "floor = max(floors)"),),
        (G + "test_the_stream_gets_shorter_but_never_below_a_lagging_group",),
        "trimming follows the group furthest ahead, dropping what a slower one still needs",
    ),
    Mutant(
        "trim_only_when_acking",
        "streamlearn/learner/durability.py",
        (("        self.writes.maybe_trim()\n", "        pass\n"),),
        (G + "test_a_caught_up_learner_trims_what_it_acknowledged_last",),
        "a caught-up learner leaves its last acknowledged entries in the stream: Redis stays full",
    ),
    Mutant(
        "no_claim",
        "streamlearn/store/stream.py",
        (
            (
                ("entries += [self._entry(eid, f) for eid, f in claimed if f]", "entries += []"),
                ("entries += [self._entry(eid, f) for eid, f in rows if f]", "entries += []"),
            ),
        ),
        (G + "test_a_new_learner_claims_what_a_dead_one_of_another_name_left_pending",),
        "entries claimed from a dead consumer are not trained on",
    ),
    Mutant(
        "padding_off",
        "streamlearn/online/batch.py",
        (("size = buckets.fit(sizes, n)", "size = n"),),
        (G + "test_learner_does_not_retrace_for_any_batch_size",),
        "the learner trains on unpadded batches (a new shape per batch size)",
    ),
    Mutant(
        "serve_eagerly",
        "streamlearn/online/forward.py",
        (
            (
                "self._call = lambda x: concrete(tf.constant(x))",
                "self._call = lambda x: model(tf.constant(x), training=False)",
            ),
        ),
        (G + "test_serving_never_traces_after_warm_up_for_any_batch_size",),
        "the actor runs the model's Python code on every batch",
    ),
    Mutant(
        "swap_during_batch",
        "streamlearn/actor/loop.py",
        (
            (
                "        y = self.predict(x, group.model)\n",
                "        self.reload()\n        y = self.predict(x, group.model)\n",
            ),
        ),
        (G + "test_a_reply_names_the_version_whose_weights_computed_it",),
        "a staged version is swapped in inside a batch (replies name weights they did not use)",
    ),
    Mutant(
        "reload_waits",
        "streamlearn/actor/reloader.py",
        (
            (
                "        tensors.set_arrays(model, arrays)\n",
                "        with self._lock:  # the load holds the lock the swap needs\n"
                "            tensors.set_arrays(model, arrays)\n",
            ),
        ),
        (G + "test_a_reload_in_progress_never_holds_up_a_batch",),
        "the serving loop waits for a version being loaded",
    ),
    Mutant(
        "backpressure_follows_slowest_group",
        "streamlearn/store/lua/stream_backlog.lua",
        (("if info['name'] == group then", "if true then"),),
        (G + "test_a_variant_far_behind_does_not_hold_back_ingest",),
        "ingest's back-pressure measures the last group listed (a lagging variant)",
    ),
    Mutant(
        "window_ttl_off",
        "streamlearn/store/lua/window_append.lua",
        (("redis.call('EXPIRE', key, ttl)", "redis.call('PERSIST', key)"),),
        (G + "test_a_devices_window_expires_window_ttl_s_after_its_last_observation",),
        "a device's stored observations never expire",
    ),
    Mutant(
        "window_ttl_ignored",
        "streamlearn/ingest/writes.py",
        (
            (
                (
                    "observations, self.cfg.window_ttl_s, self.cfg.max_devices",
                    "observations, 86_400, self.cfg.max_devices",
                ),
                ("observed, self.cfg.window_ttl_s,", "observed, 86_400,"),
                (
                    "self.windows.append(observed, self.cfg.window_ttl_s)",
                    "self.windows.append(observed, 86_400)",
                ),
                ("cfg.window_ttl_s,\n", "86_400,\n"),
            ),
        ),
        (G + "test_a_devices_window_expires_window_ttl_s_after_its_last_observation",),
        "ingest ignores window_ttl_s",
    ),
    Mutant(
        "status_period_x10",
        "streamlearn/learner/loop.py",
        (
            (
                ") * 1000 >= self.policy.status_every_ms:",
                ") * 1000 >= 10 * self.policy.status_every_ms:",
            ),
        ),
        (G + "test_status_is_refreshed_every_status_every_ms_while_learning",),
        "the learner refreshes its status ten times less often than status_every_ms",
    ),
    Mutant(
        "ingest_parse_3x_slower",
        "streamlearn/contract/payloads.py",
        (
            (
                (
                    "def parse_message(self, raw: bytes, key: str | None = None, "
                    "at: float | None = None) -> Parsed:\n",
                    "def parse_message(self, raw: bytes, key: str | None = None, "
                    "at: float | None = None) -> Parsed:\n"
                    "    self._parse_once(raw, key, at)\n"
                    "    self._parse_once(raw, key, at)\n"
                    "    return self._parse_once(raw, key, at)\n"
                    "\n"
                    "def _parse_once(self, raw: bytes, key: str | None = None, "
                    "at: float | None = None) -> Parsed:\n",
                ),
                (
                    "def parse_message(\n",
                    "def parse_message(self, raw, key=None, at=None, key_from_payload=False):\n"
                    "    self._parse_once(raw, key, at, key_from_payload)\n"
                    "    self._parse_once(raw, key, at, key_from_payload)\n"
                    "    return self._parse_once(raw, key, at, key_from_payload)\n"
                    "\n"
                    "def _parse_once(\n",
                ),
            ),
        ),
        (SMOKE + "ingest --quick",),
        "ingest parses each message three times over (a 3x slower parse)",
    ),
    Mutant(
        "retraces_metric_renamed",
        "streamlearn/learner/reporting.py",
        (('"retraces_total": t.retraces', '"retrace_count_total": t.retraces'),),
        ("tests/integration/test_metrics.py::test_workers_expose_moving_counters",),
        "a metric the tests compare before and after disappears (reads as 0 twice)",
    ),
)


def copy_tree(dest: Path) -> None:
    """The working tree as it is now: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        src = ROOT / name.decode()
        if src.is_file():
            target = dest / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def mutate(tree: Path, mutant: Mutant) -> str | None:
    """Apply the edits to `tree`; what went wrong (`mutated`), or None."""
    path = tree / mutant.file
    text, problem = mutated(path.read_text() if path.exists() else "", mutant)
    if problem is None or not problem.startswith("anchor"):
        path.write_text(text)
    return problem


def mutated(text: str, mutant: Mutant) -> tuple[str, str | None]:
    """`text` with the mutant's edits, and what went wrong (an anchor not found exactly
    once, a mutated Python file that does not compile), or None.

    A replacement's later lines get the anchor's line indentation, so that a mutant stays
    valid when the code around its anchor is indented anew.
    """
    for edit in mutant.edits:
        choices = (edit,) if isinstance(edit[0], str) else edit
        found = next(((a, r) for a, r in choices if text.count(a) == 1), None)
        if found is None:
            return text, "anchor not found once: " + " | ".join(repr(a) for a, _ in choices)
        anchor, replacement = found
        at = text.index(anchor)
        line = text[text.rfind("\n", 0, at) + 1 : at]
        indent = line[: len(line) - len(line.lstrip())]
        first, *rest = replacement.split("\n")
        lines = [first, *(indent + r if r else r for r in rest)]
        text = text.replace(anchor, "\n".join(lines))
    if mutant.file.endswith(".py"):  # a Lua script fails at its first call, in the tests
        try:
            compile(text, mutant.file, "exec")
        except SyntaxError as exc:
            return text, f"the mutated file does not compile: {exc}"
    return text, None


def check(mutants: list[Mutant]) -> int:
    """Apply each mutant to this checkout's files in memory: 1 when an anchor moved."""
    bad = 0
    for m in mutants:
        path = ROOT / m.file
        _, problem = mutated(path.read_text() if path.exists() else "", m)
        print(f"{m.name:<36} {m.file}: {problem or 'applies'}")
        bad += problem is not None
    return 1 if bad else 0


def run_tests(tree: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[str, str]:
    """Run `tests` in `tree`: ('passed' | 'failed' | 'partly' | 'timeout' | 'error', the
    output's tail). 'failed' when every listed test failed (each is one that must catch the
    fault), 'partly' when only some did. Benchmark smoke runs (`SMOKE`) run one by one."""
    smokes = [t for t in tests if t.startswith(SMOKE)]
    pytests = tuple(t for t in tests if not t.startswith(SMOKE))
    verdicts = [run_smoke(tree, s, timeout_s) for s in smokes]
    if pytests:
        verdicts.append(run_pytest(tree, pytests, timeout_s))
    kinds = {v for v, _ in verdicts}
    tail = "\n".join(t for _, t in verdicts)[-3000:]
    for kind in ("timeout", "error", "partly"):
        if kind in kinds:
            return kind, tail
    if kinds == {"failed"}:
        return "failed", tail
    return ("passed" if kinds == {"passed"} else "partly"), tail


def run_smoke(tree: Path, command: str, timeout_s: float) -> tuple[str, str]:
    """A benchmark's smoke run in `tree`: 'failed' when it exits 1 (a FAIL line)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [sys.executable, *command.split()[1:]]
    try:
        done = subprocess.run(
            argv, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        return "timeout", str(exc.stdout or "")[-2000:]
    out = (done.stdout + done.stderr)[-2000:]
    return {0: "passed", 1: "failed"}.get(done.returncode, "error"), out


def run_pytest(tree: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[str, str]:
    """pytest over `tests` in `tree`, judged as `run_tests` says."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(
            argv, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        return "timeout", str(exc.stdout or "")[-2000:]
    out = done.stdout + done.stderr
    if done.returncode == 0:
        return "passed", out[-2000:]
    if done.returncode != 1:  # collection or usage error: no verdict
        return "error", out[-3000:]
    failed = [
        line.split()[1] for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))
    ]
    caught = [t for t in tests if any(f == t or f.startswith(t + "[") for f in failed)]
    return ("failed" if len(caught) == len(tests) else "partly"), out[-2000:]


def check_copy_imports(tree: Path) -> None:
    """The copy's package, not this checkout's, is what the tests there import."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    where = subprocess.run(
        [sys.executable, "-c", "import streamlearn.ingest.loop as m; print(m.__file__)"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not where.startswith(str(tree)):
        raise SystemExit(f"the copy imports streamlearn from {where}, not from {tree}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants only")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests")
    parser.add_argument(
        "--check", action="store_true", help="only check that every mutant's anchors apply"
    )
    parser.add_argument("--timeout-s", type=float, default=300, help="per pytest run")
    parser.add_argument("--verbose", action="store_true", help="print each run's output tail")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.check:
        return check(chosen)
    if args.list or not chosen:
        for m in MUTANTS:
            print(f"{m.name}  ({m.file}): {m.breaks}")
            for test in m.tests:
                print(f"    {test}")
        return 0 if args.list else 2
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="sl-mutants-") as tmp:
        base = Path(tmp, "base")
        copy_tree(base)
        check_copy_imports(base)
        tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        started = time.monotonic()
        verdict, tail = run_tests(base, tests, args.timeout_s)
        rows.append(_row("(none)", "-", tests, verdict, started))
        if verdict != "passed":
            print(tail)
        for m in chosen:
            tree = Path(tmp, m.name)
            shutil.copytree(base, tree)
            started = time.monotonic()
            problem = mutate(tree, m)
            if problem is not None:
                verdict = "anchor missing" if problem.startswith("anchor") else "invalid mutant"
                rows.append(_row(m.name, m.file, m.tests, verdict, started))
                print(f"{m.name}: {m.file}: {problem}")
            else:
                verdict, tail = run_tests(tree, m.tests, args.timeout_s)
                rows.append(_row(m.name, m.file, m.tests, verdict, started))
                if args.verbose or verdict in ("passed", "partly", "error"):
                    print(f"--- {m.name}: {verdict}\n{tail}")
            shutil.rmtree(tree, ignore_errors=True)
    results = [r["result"] for r in rows[1:]]
    checks = {
        "the unmutated tests pass": rows[0]["result"] == "passed",
        "every mutant is killed": all(r.startswith("killed") for r in results),
    }
    report("mutants", rows, checks, mutants={m.name: m.breaks for m in chosen})
    return 0 if all(checks.values()) else 1


def _row(name: str, file: str, tests: tuple[str, ...], verdict: str, started: float) -> dict:
    if name == "(none)":
        result = verdict
    else:
        result = {
            "passed": "survived",  # the tests passed with the fault in
            "failed": "killed",
            "partly": "partly killed",
            "timeout": "killed (timeout)",
            "error": "error (no verdict)",
        }.get(verdict, verdict)
    short = ", ".join(t.removeprefix("python -m ").split("::")[-1] for t in tests)
    short = short if name != "(none)" else f"{len(tests)}"
    return {
        "mutant": name,
        "file": file,
        "tests": short,
        "result": result,
        "seconds": round(time.monotonic() - started, 1),
    }


if __name__ == "__main__":
    raise SystemExit(main())
