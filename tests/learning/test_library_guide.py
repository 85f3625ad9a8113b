"""docs/guides/library.md runs as written: its examples are doctests (the fences become
blank lines, which end an example's expected output), with scikit-learn's bundled data."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

GUIDE = Path(__file__).parents[2] / "docs" / "guides" / "library.md"


def test_the_library_guide_runs_as_written():
    text = re.sub(r"^```\w*$", "", GUIDE.read_text(), flags=re.M)
    test = doctest.DocTestParser().get_doctest(text, {}, "library.md", str(GUIDE), 0)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    runner = doctest.DocTestRunner(optionflags=flags)
    runner.run(test)
    assert runner.failures == 0, "an example of the guide gives other output (see above)"
    assert runner.tries >= 10, runner.tries
