"""streamlearn: real-time online learning over MQTT.

What an application imports first is the client (`pip install streamlearn`, paho-mqtt
only); the service's modules (ingest, learner, actor) need `streamlearn[service]`.

    from streamlearn import Client, Prediction, PredictionError

The names are loaded on first use, so that `import streamlearn.contract.names` and the like
load no MQTT client, and the client loads neither TensorFlow nor Keras nor Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.client.aio import AsyncClient
    from streamlearn.client.client import Client, Prediction, PredictionError

__all__, __getattr__ = exports(
    __name__,
    {n: "client" for n in ("AsyncClient", "Client", "Prediction", "PredictionError")},
)
