"""MQTT topics and Redis keys of one model, as the design contract fixes them."""

from __future__ import annotations

from dataclasses import dataclass, replace


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
    variant: str | None = None  # None: the model's own weights keys, the ones actors read
    partition: int = 0  # the stream partition of the stream keys (`streamlearn.store.partitions`)

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

    def stream_key(self, leaf: str) -> str:
        """A key of this partition of the sample stream: partition 0's are the model's own
        keys; partition i's carry the hash tag `{model:pi}`, a slot of their own.

        >>> Names("demo").of_partition(2).samples_key
        'sl:{demo:p2}:samples'
        """
        tag = self.model if self.partition == 0 else f"{self.model}:p{self.partition}"
        return f"{self.key_prefix}:{{{tag}}}:{leaf}"

    def of_partition(self, partition: int) -> Names:
        return replace(self, partition=partition)

    @property
    def samples_key(self) -> str:
        return self.stream_key("samples")

    @property
    def ingest_count_key(self) -> str:
        """Samples ever appended to the stream (`store.appends`, `store.windows`)."""
        return self.stream_key("ingest:count")

    @property
    def deadletter_key(self) -> str:
        return self.key("deadletter")

    @property
    def latest_key(self) -> str:
        return self.key(f"{self._weights}:latest")

    @property
    def weights_channel(self) -> str:
        return self.key(self._weights)

    @property
    def blobs_key(self) -> str:
        """Hash: version -> weights blob, for every version kept (`streamlearn.store.weights`)."""
        return self.key(f"{self._weights}:blobs")

    @property
    def versions_key(self) -> str:
        """List of the newest versions kept, oldest first (`streamlearn.store.weights`)."""
        return self.key(f"{self._weights}:versions")

    @property
    def history_key(self) -> str:
        """Sorted set: one version per `learner.history_every_s`, scored by publish time (ms)."""
        return self.key(f"{self._weights}:history")

    @property
    def pin_key(self) -> str:
        """The version actors serve instead of the latest (absent: none pinned). Always the
        model's, as actors read only the model's weights keys.

        >>> Names("demo").of_variant("fast").pin_key
        'sl:{demo}:weights:pin'
        """
        return self.key("weights:pin")

    @property
    def labels_key(self) -> str:
        """Hash: version label (`stable`...) -> version, set by `streamlearn pin --label`;
        the trim keeps a labelled version. Always the model's, as `pin_key`."""
        return self.key("weights:labels")

    @property
    def _weights(self) -> str:
        return "weights" if self.variant is None else f"variant:{self.variant}:weights"

    # -- variants and promotion (`streamlearn.learner.variants`) --------------------------------

    def of_variant(self, variant: str) -> Names:
        """The same model, with the weights keys of one of its variants.

        >>> Names("demo").of_variant("fast").latest_key
        'sl:{demo}:variant:fast:weights:latest'
        """
        return replace(self, variant=variant)

    @property
    def champion_key(self) -> str:
        """The variant the actors serve (absent: `base`)."""
        return self.key("champion")

    @property
    def promotion_key(self) -> str:
        """The last promotion, as announced (JSON)."""
        return self.key("promotion")

    @property
    def variants_key(self) -> str:
        """Hash: each variant's online figures, written by its learner."""
        return self.key("variants")

    @property
    def champion_topic(self) -> str:
        return self.topic("champion")

    # -- labels that come later (`streamlearn.store.pending`) --------------------------------

    @property
    def labels_topic(self) -> str:
        """Where labels for earlier predictions arrive: `{"id", "y"}` or `{"labels": [...]}`."""
        return self.topic("labels")

    def pending_key(self, request_id: str) -> str:
        """One served prediction kept for its label: features, version, prediction.

        >>> Names("demo").pending_key("r-7")
        'sl:{demo}:pending:r-7'
        """
        return self.key(f"pending:{request_id}")

    @property
    def pending_index_key(self) -> str:
        """Sorted set of the kept predictions' ids by expiry: what bounds their number."""
        return self.key("pending")

    @property
    def served_key(self) -> str:
        """Hash: the served score, sums over the labels joined to served predictions."""
        return self.key("served")

    @property
    def served_delays_key(self) -> str:
        """List: the newest label delays (seconds), for the served score's percentiles."""
        return self.key("served:delays")

    @property
    def fields_key(self) -> str:
        """Hash: what named payloads held besides their inputs, summed over every ingest
        process (`streamlearn.store.fields.FieldTotals`)."""
        return self.key("fields")
