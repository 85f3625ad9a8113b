"""The keys of a model's device states an actor tracks (`streamlearn.actor.states`): at
most `max_devices`, the least recently seen evicted first, and when each key's next state
is due (`every_s` after its last). What bounds the retained states is the model's index
(`streamlearn.store.state_index`), not this. Pure: no I/O, no lock.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np


@dataclass(slots=True)
class Reading:
    """A device's reading, parsed: one row of x (a window model's newest step) and its seq."""

    x: np.ndarray  # (1, inputs)
    seq: float | None = None


@dataclass(slots=True, eq=False)
class Device:
    """A key with a state: when its last went out, and the reading waiting for the next."""

    key: str
    reading: Reading | None = None
    published_at: float = -math.inf  # time.monotonic() of its last prediction
    queued: bool = False  # in the due queue


@dataclass
class Devices:
    """The keys with a state, at most `max_devices`, least recently seen first, and when
    each is due. Pure: no I/O, no lock (`States` holds one around it).

    >>> d = Devices(max_devices=2, every_s=10)
    >>> d.offer("a", Reading(np.zeros((1, 1))), now=0), d.offer("b", Reading(np.ones((1, 1))), 0)
    (None, None)
    >>> [device.key for device, _ in d.take(now=0, limit=8)]
    ['a', 'b']
    >>> d.offer("c", Reading(np.ones((1, 1))), now=1).key  # past the bound: the oldest goes
    'a'
    """

    max_devices: int
    every_s: float
    evicted: int = 0
    replaced: int = 0  # readings replaced by a newer one before they were predicted
    _devices: OrderedDict[str, Device] = field(default_factory=OrderedDict)
    _due: list[tuple[float, int, Device]] = field(default_factory=list)  # a heap
    _order: Iterator[int] = field(default_factory=itertools.count)

    def __len__(self) -> int:
        return len(self._devices)

    def offer(self, key: str, reading: Reading, now: float) -> Device | None:
        """Keep `reading` as `key`'s latest; the device evicted to make room, if one was."""
        device = self._devices.get(key)
        evicted = None
        if device is None:
            if len(self._devices) >= self.max_devices:
                evicted = self._devices.popitem(last=False)[1]
                evicted.reading = None
                self.evicted += 1
            device = self._devices[key] = Device(key)
        else:
            self._devices.move_to_end(key)
        if device.reading is not None:
            self.replaced += 1
        device.reading = reading
        if not device.queued:
            device.queued = True
            due = max(now, device.published_at + self.every_s)
            heapq.heappush(self._due, (due, next(self._order), device))
            self._compact()
        return evicted

    def take(self, now: float, limit: int) -> list[tuple[Device, Reading]]:
        """Up to `limit` devices whose period has ended, with their readings; their next
        period starts now."""
        out: list[tuple[Device, Reading]] = []
        while self._due and len(out) < limit and self._due[0][0] <= now:
            device = heapq.heappop(self._due)[2]
            if not self.holds(device):
                continue  # evicted while it waited
            device.queued = False
            reading, device.reading = device.reading, None
            if reading is not None:
                device.published_at = now
                out.append((device, reading))
        return out

    def holds(self, device: Device) -> bool:
        """Whether `device` is still tracked (not evicted, forgotten, nor its key anew)."""
        return self._devices.get(device.key) is device

    def forget(self, key: str) -> None:
        """Stop tracking `key` (its state was cleared): a reading waiting for it is dropped."""
        device = self._devices.pop(key, None)
        if device is not None:
            device.reading = None

    def _compact(self) -> None:
        """Evicted devices' entries leave the due queue when due; past twice the bound,
        all at once, so that a flood of new keys cannot grow it."""
        if len(self._due) > 2 * self.max_devices + 1024:
            self._due = [entry for entry in self._due if self.holds(entry[2])]
            heapq.heapify(self._due)
