"""MkDocs hooks (mkdocs.yml `hooks:`): a break opportunity after each dot and underscore of
an identifier in a table cell, so that a narrow column breaks `models.<name>.kept_versions`
between its words, never inside one (`…nam e` at 1280 px, issue 64). The search index
reads the text without the tags: the identifier is found whole and by its parts."""

from __future__ import annotations

import re
from typing import Any

_CELL_CODE = re.compile(r"(<td[^>]*>(?:(?!</td>).)*?<code>)((?:(?!</code>).)+)(</code>)", re.S)
_JOINT = re.compile(r"(?<=[._])(?=[\w&])")  # after a dot or an underscore, before a word


def on_page_content(html: str, **_: Any) -> str:
    return _CELL_CODE.sub(lambda m: m[1] + _JOINT.sub("<wbr>", m[2]) + m[3], html)
