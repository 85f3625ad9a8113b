"""The client, paho-mqtt only (`pip install streamlearn`): publish samples and ask for
predictions over MQTT. Nothing here imports numpy, Redis, pydantic, Keras or TensorFlow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.client.aio import AsyncClient
    from streamlearn.client.client import Client
    from streamlearn.client.pending import ConnectionClosedError, Prediction, PredictionError


__all__, __getattr__ = exports(
    __name__,
    {
        "Client": "client",
        "AsyncClient": "aio",
        "Prediction": "pending",
        "PredictionError": "pending",
        "ConnectionClosedError": "pending",
    },
)
