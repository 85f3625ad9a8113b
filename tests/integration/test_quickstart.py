"""The quick start page, run as written: from a CSV file to a judged, served model.

The commands are read from docs/getting-started/quickstart.md, not copied here, so the
test fails when the page says something that does not work (tests/unit/test_readme.py
holds the README's three steps to the page's). They run as a user would run them
(`tests.pages`): in a fresh directory holding `examples/` and the `.venv` that runs these
tests, with no STREAMLEARN_* URL in the environment, `up` in the first shell and the rest
in a second shell that finds the stack through `up`'s run file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests import pages
from tests.conftest import ROOT

QUICKSTART = ROOT / "docs" / "getting-started" / "quickstart.md"


def test_the_quick_start_runs_as_written(tmp_path: Path):
    page = pages.read(QUICKSTART)
    shells = pages.Shells(tmp_path)
    for step in page.first:
        shells.take(step)
    config = (shells.home / "streamlearn.toml").read_text()
    named = 'inputs = ["temperature", "vibration", "rpm", "load"]'
    assert named in config and 'task = "binary"' in config, config[:2000]

    with shells.stack(page.up):
        shells.serving(page.up)
        for step in page.second:
            shells.take(step)

    shells.from_the_stack()
    evaluated = shells.output("evaluate").stdout
    accuracy = re.search(r"served accuracy\D*?([01]\.\d+)", evaluated)
    assert accuracy and float(accuracy[1]) > 0.8, evaluated  # a logistic fit gets ~0.91
    # the labels came 50 rows late, alone: the service joined them and scored what it served
    service = re.search(
        r"service's served score: ([\d,]+) labels joined, accuracy ([01]\.\d+)", evaluated
    )
    rows = len((ROOT / "examples" / "machines.csv").read_text().splitlines()) - 1
    assert service and int(service[1].replace(",", "")) == rows, evaluated
    assert abs(float(service[2]) - float(accuracy[1])) < 0.01, evaluated
    predicted = shells.output("predict")
    reply = json.loads(predicted.stdout)
    assert reply["model"] == "machines" and reply["y"] > 0.8, reply  # the page: y near 1
    [(step, _)] = [(s, d) for s, d in shells.done if s.shown]  # the reply as the page shows it
    assert step.words[1] == "predict" and [lang for lang, _ in step.shown] == ["json"]
    pages.matches_shown(*step.shown[0], predicted.stdout)
    assert "machines" in shells.output("status").stdout
