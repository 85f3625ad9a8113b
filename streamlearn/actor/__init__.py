"""The actor role: prediction requests in (`inbox`), answered in dynamic batches by the
compiled forward pass (`streamlearn.online.forward`) with hot-reloaded weights (`reloader`), replies
routed and checked (`replies`), by the loop (`loop`); `worker` is its process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.actor.inbox import Inbox
    from streamlearn.actor.loop import Actor
    from streamlearn.actor.reloader import WeightsReloader
    from streamlearn.actor.replies import Replier


__all__, __getattr__ = exports(
    __name__,
    {
        "Actor": "loop",
        "Inbox": "inbox",
        "WeightsReloader": "reloader",
        "Replier": "replies",
    },
)
