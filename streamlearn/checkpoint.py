"""Learner checkpoints: every training variable plus the learner's counters, in one file.

The file is a weights blob (`codec`: the safetensors layout, nothing in it can run code)
whose metadata holds the counters as JSON. It is written to a temporary file, synced and
renamed over the previous one, so a crash at any moment leaves the last complete checkpoint.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from streamlearn import codec
from streamlearn.errors import WeightsError

FORMAT = "streamlearn.checkpoint/1"
FILENAME = "checkpoint.safetensors"


@dataclass(frozen=True)
class Checkpoint:
    arrays: dict[str, np.ndarray]
    state: dict[str, Any]


class CheckpointDir:
    """The checkpoint of one model in `directory` (created when missing)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILENAME

    def save(self, arrays: dict[str, np.ndarray], state: dict[str, Any]) -> None:
        """Replace the checkpoint atomically (write, fsync, rename, fsync the directory)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        blob = codec.encode(arrays, {"format": FORMAT, "state": json.dumps(state)})
        tmp = self.directory / f".{FILENAME}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def load(self) -> Checkpoint | None:
        """The last checkpoint, None when there is none; WeightsError when it is unusable."""
        try:
            blob = self.path.read_bytes()
        except FileNotFoundError:
            return None
        arrays, meta = codec.decode(blob)
        if meta.get("format") != FORMAT:
            raise WeightsError(f"{self.path}: not a {FORMAT} file, got {meta.get('format')!r}")
        try:
            state = json.loads(meta["state"])
        except (KeyError, ValueError) as exc:
            raise WeightsError(f"{self.path}: unreadable state: {exc!r}") from None
        if not isinstance(state, dict):
            raise WeightsError(f"{self.path}: state must be a JSON object, got {state!r}")
        return Checkpoint(arrays, state)
