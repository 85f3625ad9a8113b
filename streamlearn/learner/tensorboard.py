"""Learner curves for TensorBoard: online loss and metric, samples/s and version."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from streamlearn.errors import ConfigError


class Rate:
    """Samples per second between two readings of a running total."""

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None

    def update(self, total: int, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        last, self._last = self._last, (now, total)
        if last is None or now <= last[0]:
            return None
        return (total - last[1]) / (now - last[0])


class ScalarLog:
    """Writes one point per status tick, at step = samples trained on (TensorFlow summaries)."""

    SCALARS = ("online_loss", "online_metric", "samples_per_s", "version")

    def __init__(self, logdir: str | Path, model: str) -> None:
        try:
            import tensorflow as tf
        except ImportError:
            raise ConfigError("learner.tensorboard_dir needs TensorFlow installed") from None
        from tensorflow.core.framework import summary_pb2

        self._tf = tf
        self.writer = tf.summary.create_file_writer(str(Path(logdir) / model))
        # What tf.summary.scalar would tag, without needing the tensorboard package installed.
        self._meta = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        ).SerializeToString()

    def write(self, status: dict[str, Any]) -> None:
        step = int(status.get("samples_seen") or 0)
        with self.writer.as_default(step=step):
            for name in self.SCALARS:
                value = status.get(name)
                if isinstance(value, int | float):
                    tensor = self._tf.constant(float(value), dtype=self._tf.float32)
                    self._tf.summary.write(name, tensor, metadata=self._meta)
        self.writer.flush()
