"""A learnable synthetic stream for any model config (`streamlearn publish --demo`)."""

from __future__ import annotations

import zlib

import numpy as np

from streamlearn.config.app import ModelConfig
from streamlearn.contract.records import Samples


class DemoStream:
    """Samples of a fixed function of x, seeded by the model name.

    regression: y = tanh(x . w); binary: y = [x . w > 0]; multiclass: y = argmax(x W);
    for sequence models x . w is taken over the window's last step.
    """

    def __init__(self, cfg: ModelConfig, seed: int | None = None) -> None:
        self.cfg = cfg
        base = zlib.crc32(cfg.name.encode())
        self.w = (
            np.random.default_rng(base).normal(size=(cfg.inputs, cfg.outputs)).astype(np.float32)
        )
        self.rng = np.random.default_rng(base + 1 if seed is None else seed)

    def target(self, x: np.ndarray) -> np.ndarray:
        last = x[:, -1, :] if x.ndim == 3 else x
        z = last @ self.w
        if self.cfg.task == "regression":
            return np.tanh(z[:, 0])
        if self.cfg.task == "binary":
            return (z[:, 0] > 0).astype(np.float32)
        return np.argmax(z, axis=1).astype(np.float32)

    def sample(self, n: int) -> Samples:
        x = self.rng.normal(size=(n, *self.cfg.sample_shape)).astype(np.float32)
        return Samples(x, self.target(x).astype(np.float32))

    def payload(self, n: int) -> dict[str, object]:
        """One MQTT payload: a single sample when n == 1, else columnar."""
        s = self.sample(n)
        if n == 1:
            return {"x": s.x[0].tolist(), "y": float(s.y[0])}
        return {"x": s.x.tolist(), "y": s.y.tolist()}
