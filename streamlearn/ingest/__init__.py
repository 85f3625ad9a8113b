"""The ingest role: MQTT sample messages in (`inbox`), validated and appended exactly once
to the samples stream (`writes`), by the loop (`loop`); `worker` is its process.
"""

from __future__ import annotations

from streamlearn._lazy import exports

__all__ = ["Ingest", "IngestCounters", "IngestInbox", "RunWriter"]

__getattr__ = exports(
    __name__,
    {
        "Ingest": "loop",
        "IngestInbox": "inbox",
        "RunWriter": "writes",
        "IngestCounters": "writes",
    },
)
