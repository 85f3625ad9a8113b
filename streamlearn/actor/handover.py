"""Replies handed from the serving loop's thread to a door's event loop.

A door (HTTP, gRPC) waits on a future per request in its own event loop; the serving loop
answers a batch's requests from its thread. Waking the door's loop once per reply (a
`call_soon_threadsafe` each: a write to its self-pipe, a turn of the loop) cost more than
the reply under load; the replies handed over until the loop turns are settled in one
wake-up, so a batch of 32 costs one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

Reply = dict[str, Any]


class Handover:
    """One door's replies on their way to its event loop."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None  # the door's, once it runs
        self._replies: deque[tuple[asyncio.Future[Reply], Reply]] = deque()
        self._waking = False  # a settling is scheduled

    def give(self, future: asyncio.Future[Reply], reply: Reply) -> None:
        """Hand `reply` to `future` (any thread)."""
        self._replies.append((future, reply))
        if not self._waking:
            self._waking = True
            loop = self.loop
            if loop is not None and not loop.is_closed():  # not after the door stopped
                loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        self._waking = False  # first: a reply handed over from now on schedules another
        while self._replies:
            future, reply = self._replies.popleft()
            if not future.done():  # not when its client went away meanwhile
                future.set_result(reply)
