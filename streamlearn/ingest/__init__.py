"""The ingest role: MQTT sample messages in (`inbox`), validated and appended exactly once
to the samples stream (`writes`), by the loop (`loop`); readings of several topics held
and assembled into samples (`assembly`); `worker` is its process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.ingest.inbox import IngestInbox
    from streamlearn.ingest.loop import Ingest
    from streamlearn.ingest.writes import IngestCounters, RunWriter


__all__, __getattr__ = exports(
    __name__,
    {
        "Ingest": "loop",
        "IngestInbox": "inbox",
        "RunWriter": "writes",
        "IngestCounters": "writes",
    },
)
