"""The actor role: prediction requests in (`inbox`), answered in dynamic batches by the
compiled forward pass (`forward`) with hot-reloaded weights (`reloader`), replies
routed and checked (`replies`), by the loop (`loop`); `worker` is its process.
"""

from __future__ import annotations

from streamlearn._lazy import exports

__all__ = ["Actor", "Forward", "Inbox", "Replier", "WeightsReloader"]

__getattr__ = exports(
    __name__,
    {
        "Actor": "loop",
        "Inbox": "inbox",
        "Forward": "forward",
        "WeightsReloader": "reloader",
        "Replier": "replies",
    },
)
