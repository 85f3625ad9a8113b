"""The one loader of the Lua scripts beside it, `streamlearn/store/lua/*.lua`.

A script is `lua/{name}.lua`. A line `--#include other` is replaced by `lua/other.lua`
(a shared prelude, so a format is spelled once), which keeps a `#!lua flags=...` line
first, where Redis looks for it. Scripts are registered with redis-py (`register_script`:
EVALSHA, loaded again by redis-py when Redis has lost it).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import redis
from redis.commands.core import Script

_LUA = Path(__file__).parent  # the scripts sit beside their loader
_INCLUDE = re.compile(r"^--#include (\w+)$", re.MULTILINE)


@functools.cache
def source(name: str) -> str:
    """The text of `lua/{name}.lua`, its includes expanded.

    >>> source("weights_publish").startswith("-- Publish one weights blob")
    True
    """
    text = (_LUA / f"{name}.lua").read_text()
    return _INCLUDE.sub(lambda m: source(m.group(1)).rstrip("\n"), text)


def load(client: redis.Redis, name: str) -> Script:
    """`lua/{name}.lua` registered on `client`."""
    return client.register_script(source(name))
