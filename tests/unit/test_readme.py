"""The README as a front page, and the docs pages that must agree with it and with the tree.

The README shows the quick start's three steps as the quick start page does (the page's
commands are the ones tests/integration/test_quickstart.py runs), stays short, and links
only to files that exist; the Layout page lists every module of `streamlearn/` and no
module that is gone.
"""

from __future__ import annotations

import re

from tests.conftest import ROOT

README = ROOT / "README.md"
QUICKSTART = ROOT / "docs" / "getting-started" / "quickstart.md"
LAYOUT = ROOT / "docs" / "development" / "layout.md"


def fenced(text: str, lang: str) -> list[str]:
    """The bodies of the text's fenced blocks in `lang`, in order."""
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def test_the_readme_shows_the_quick_start_pages_three_steps():
    readme = README.read_text(encoding="utf-8")
    steps = readme.split("## From a CSV file to a prediction", 1)[1].split("\n## ", 1)[0]
    page = QUICKSTART.read_text(encoding="utf-8")
    shown = fenced(steps, "sh")
    assert len(shown) == 3, "init, up, then evaluate and predict"
    assert shown == fenced(page, "sh")[:3]
    assert fenced(steps, "json") == fenced(page, "json")[:1], "the same reply shown"
    assert [b.split()[0:2] for b in shown] == [
        [".venv/bin/streamlearn", "init"],
        [".venv/bin/streamlearn", "up"],
        [".venv/bin/streamlearn", "evaluate"],
    ]
    assert "streamlearn predict" in shown[2]


def test_the_readme_is_a_front_page():
    """Its first screen says for whom, how mature, what the set-up installs and the two
    commands (run it, test it); the rest is short and points into docs/."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: its detail goes to docs/"
    screen = "\n".join(lines[:24])
    for command in ("bash run.sh up ", "bash run.sh test "):  # CI runs the second
        assert f"\n{command}" in screen, f"{command!r} in the first screen"
    for said in ("For engineers", "MQTT", "Pre-1.0", "Debian", "GB"):
        assert said in screen, said
    first = next(i for i, line in enumerate(lines) if line.startswith((".venv/", "python3 ")))
    assert first < 45, f"the first install command is on line {first + 1}"


def test_the_readmes_links_reach_files():
    readme = README.read_text(encoding="utf-8")
    targets = {t.split("#")[0] for t in re.findall(r"\]\(([^)]+)\)", readme)}
    local = {t for t in targets if t and "://" not in t}
    assert local, "the README links into the docs"
    assert [t for t in sorted(local) if not (ROOT / t).exists()] == []


def listed_modules(page: str) -> tuple[set[str], set[str]]:
    """The Layout block's files and folders as repository paths.

    A line that starts in column 0 names a top-level folder (`streamlearn/`), one indented
    by two spaces a package under `streamlearn/`; the names that follow, up to the first
    word that is not a file or folder name, are what that folder holds.
    """
    block = re.search(r"```\n(streamlearn/.*?)```", page, re.S)
    assert block, "the Layout page has its tree block"
    files: set[str] = set()
    folders: set[str] = set()
    folder = ""
    for line in block[1].splitlines():
        words = line.split()
        if not words:
            continue
        if not line.startswith(" "):
            folder, words = words[0], words[1:]
        elif re.match(r"  \S", line):
            folder, words = f"streamlearn/{words[0]}", words[1:]
        for word in words:
            name = word.rstrip(",")
            if name.endswith(".py"):
                files.add(folder + name)
            elif re.fullmatch(r"\w+/", name):
                folders.add(folder + name)
            else:
                break
    return files, folders


def test_the_layout_page_lists_every_module_and_no_gone_one():
    files, folders = listed_modules(LAYOUT.read_text(encoding="utf-8"))
    tree = {p.relative_to(ROOT).as_posix() for p in (ROOT / "streamlearn").rglob("*.py")}

    def covered(path: str) -> bool:
        if path in files or any(path.startswith(f) for f in folders):
            return True
        return path.endswith("/__init__.py") and path.count("/") == 2  # a package's face

    assert sorted(p for p in tree if not covered(p)) == [], "modules the Layout page omits"
    gone = [p for p in sorted(files | folders) if not (ROOT / p).exists()]
    assert gone == [], "the Layout page lists what is not in the tree"


def test_the_layout_check_reads_a_tree_as_drawn():
    page = "```\nstreamlearn/  __init__.py    the face\n  store/      a.py lua/  b\n```"
    assert listed_modules(page) == (
        {"streamlearn/__init__.py", "streamlearn/store/a.py"},
        {"streamlearn/store/lua/"},
    )
