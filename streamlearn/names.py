"""MQTT topics and Redis keys of one model, as the design contract fixes them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Names:
    """Every topic and key of `model`. `{model}` braces are a Redis Cluster hash tag.

    >>> Names("demo").samples_key
    'sl:{demo}:samples'
    >>> Names("demo").shared("predict", "g")
    '$share/g/streamlearn/demo/predict'
    """

    model: str
    topic_prefix: str = "streamlearn"
    key_prefix: str = "sl"

    def topic(self, leaf: str) -> str:
        return f"{self.topic_prefix}/{self.model}/{leaf}"

    def shared(self, leaf: str, group: str) -> str:
        return f"$share/{group}/{self.topic(leaf)}"

    @property
    def samples_topic(self) -> str:
        return self.topic("samples")

    @property
    def predict_topic(self) -> str:
        return self.topic("predict")

    @property
    def predictions_topic(self) -> str:
        return self.topic("predictions")

    @property
    def status_topic(self) -> str:
        return self.topic("status")

    def key(self, leaf: str) -> str:
        return f"{self.key_prefix}:{{{self.model}}}:{leaf}"

    @property
    def samples_key(self) -> str:
        return self.key("samples")

    @property
    def deadletter_key(self) -> str:
        return self.key("deadletter")

    @property
    def latest_key(self) -> str:
        return self.key("weights:latest")

    @property
    def weights_channel(self) -> str:
        return self.key("weights")

    def weights_key(self, version: int) -> str:
        return self.key(f"weights:{version}")
