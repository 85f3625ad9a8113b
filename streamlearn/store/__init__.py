"""Every Redis structure and its Lua: connecting (a server or a Cluster), the scripts
(`lua/`), the samples stream and its exactly-once appends, partitions, per-device
windows, readings held for assembly, the weights store, and calls sent ahead or retried.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.store.appends import Appender
    from streamlearn.store.held import HeldStore
    from streamlearn.store.partitions import PartitionedStream, open_stream
    from streamlearn.store.redis_client import connect
    from streamlearn.store.retries import Retried
    from streamlearn.store.sent import Sent
    from streamlearn.store.stream import Entry, Packed, SampleStream, group_of
    from streamlearn.store.weights import WeightsStore
    from streamlearn.store.windows import WindowStore


__all__, __getattr__ = exports(
    __name__,
    {
        "connect": "redis_client",
        "SampleStream": "stream",
        "HeldStore": "held",
        "Packed": "stream",
        "Entry": "stream",
        "group_of": "stream",
        "Appender": "appends",
        "PartitionedStream": "partitions",
        "open_stream": "partitions",
        "WindowStore": "windows",
        "WeightsStore": "weights",
        "Retried": "retries",
        "Sent": "sent",
    },
)
