"""MQTT topics and Redis keys of one model, as the design contract fixes them; and the
namespaces that bind request and sample ids to their sender's topic level."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

# A sender's topic level (`predict/{client}`, `labels/{client}`, `samples/{client}`): the
# broker's ACL binds it to the client id, and it names keys, so it is bounded.
MAX_SENDER_CHARS = 128
# Starts every de-duplication id that is not a device's own bare sample id: a sample id
# holds no control character (docs/contract.md §2.1), so none can take these.
SCOPED = "\x1f"


def sender_problem(sender: str | None) -> str | None:
    """What is wrong with a sender's topic level, if anything (None: bare, or fine).

    >>> sender_problem("dev-1") is None, sender_problem("")
    (True, 'the client level is empty')
    """
    if sender is None or 1 <= len(sender) <= MAX_SENDER_CHARS:
        return None
    if not sender:
        return "the client level is empty"
    return f"the client level has {len(sender)} characters, more than {MAX_SENDER_CHARS}"


def http_owner(token: bytes | None, peer: str) -> str:
    """The namespace of an HTTP client's request ids (`owned`): its bearer token's, as 16
    hex characters of a BLAKE2b digest (never the token), else its address's. It holds a
    `/`, which no topic level holds: no `predict/{client}` or bare `predict` takes it.

    >>> http_owner(None, "10.0.0.5"), len(http_owner(b"s3cret", "10.0.0.5"))
    ('http/a:10.0.0.5', 23)
    """
    if token is None:
        return f"http/a:{peer}"
    digest = hashlib.blake2b(token, digest_size=8, person=b"sl-http-owner").hexdigest()
    return f"http/t:{digest}"


def owned(sender: str | None, request_id: str | int) -> str:
    """A request id in its sender's namespace, typed, as kept predictions and labels name
    it: `-` the anonymous namespace (bare `predict`), else the sender's level (or an HTTP
    client's owner, `http_owner`) length-prefixed, so no level or id, whatever its
    characters, takes another's.

    >>> owned(None, "42"), owned(None, 42), owned("dev:1", "r"), owned("http/a:::1", "r")
    ('-:s:42', '-:i:42', '5:dev:1:s:r', '10:http/a:::1:s:r')
    """
    who = "-" if sender is None else f"{len(sender)}:{sender}"
    return f"{who}:{'i' if isinstance(request_id, int) else 's'}:{request_id}"


def sample_id(sender: str | None, sid: str) -> str:
    """The de-duplication id of a sample's `id`: itself on bare `samples` (the namespace
    every earlier id is in), else in its sender's namespace.

    >>> sample_id(None, "s-1"), sample_id("dev", "s-1")
    ('s-1', '\\x1fs3:dev:s-1')
    """
    return sid if sender is None else f"{SCOPED}s{len(sender)}:{sender}:{sid}"


def id_sender(did: str) -> str | None:
    """The sender in whose namespace a de-duplication id is (`sample_id`, `label_id`):
    None for a bare sample's id and a label of a prediction asked anonymously.

    >>> id_sender(sample_id("d:1", "x")), id_sender(label_id(owned("dev", 4))), id_sender("s")
    ('d:1', 'dev', None)
    """
    if not did.startswith(SCOPED) or did[2:3] == "-":
        return None
    size, _, rest = did[2:].partition(":")
    return rest[: int(size)]


def label_id(request: str) -> str:
    """The de-duplication id of the sample a label joins to the prediction kept as
    `request` (`owned`): in a space no device's sample id can take, so none can burn it.

    >>> label_id(owned("dev", 42))
    '\\x1fl3:dev:i:42'
    """
    return f"{SCOPED}l{request}"


def assembled_id(sid: str) -> str:
    """The de-duplication id of a sample ingest assembled from held readings
    (`streamlearn.store.held`): shared by every sender, as bare `samples` is, in a space
    no device's sample id can take.

    >>> assembled_id("dev-1|3|ab12"), id_sender(assembled_id("dev-1|p7"))
    ('\\x1fa-:dev-1|3|ab12', None)
    """
    return f"{SCOPED}a-:{sid}"


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

    def held_key(self, leaf: str) -> str:
        """A key of the readings held for assembly (`streamlearn.store.held`), in the
        model's slot: `held:k:{device}` per device, `held:index` and the rest beside.

        >>> Names("demo").held_key("k:dev-1")
        'sl:{demo}:held:k:dev-1'
        """
        return self.key(f"held:{leaf}")

    def sparkplug_key(self, leaf: str) -> str:
        """A key of the Sparkplug B edge nodes' shared state (`streamlearn.store.sparkplug`),
        in the model's slot: `sp:n:{group}/{node}` per node, `sp:index` and the rest beside.

        >>> Names("demo").sparkplug_key("n:plant/edge-1")
        'sl:{demo}:sp:n:plant/edge-1'
        """
        return self.key(f"sp:{leaf}")

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
        """Sorted set: one version per `learner.history.every_s`, scored by publish time (ms)."""
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
    def lease_key(self) -> str:
        """The learner's lease (`streamlearn.store.lease`): the holder's token, with a TTL;
        a variant's learner holds its own.

        >>> Names("demo").lease_key, Names("demo").of_variant("fast").lease_key
        ('sl:{demo}:learner:lease', 'sl:{demo}:variant:fast:learner:lease')
        """
        own = "" if self.variant is None else f"variant:{self.variant}:"
        return self.key(f"{own}learner:lease")

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
        """Where labels for earlier predictions arrive: `{"id", "y"}` or `{"labels": [...]}`.
        Bare, they label bare `predict`'s predictions; on `labels/{client}`, those
        requested on `predict/{client}` (`sender_of`). HTTP's come over HTTP."""
        return self.topic("labels")

    def sender_of(self, topic: str) -> tuple[str, str | None] | None:
        """(`samples` or `labels`, its sender's level or None when bare) of one of this
        model's samples or labels topics; None for any other topic.

        >>> n = Names("demo")
        >>> n.sender_of("streamlearn/demo/labels/dev-1"), n.sender_of("streamlearn/demo/samples")
        (('labels', 'dev-1'), ('samples', None))
        """
        base = self.topic("")
        if not topic.startswith(base):
            return None
        leaf, _, sender = topic[len(base) :].partition("/")
        if leaf not in ("samples", "labels") or "/" in sender:
            return None
        return leaf, (sender if topic != self.topic(leaf) else None)

    def pending_key(self, request: str) -> str:
        """One served prediction kept for its label (features, version, prediction), under
        its request id in its sender's namespace (`owned`).

        >>> Names("demo").pending_key(owned("dev-1", "r-7"))
        'sl:{demo}:pending:5:dev-1:s:r-7'
        """
        return self.key(f"pending:{request}")

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
    def states_key(self) -> str:
        """Sorted set: the device keys with a retained state (§2.9), by their last state's
        time; what bounds them across every actor (`streamlearn.store.state_index`).

        >>> Names("room").states_key
        'sl:{room}:served:states'
        """
        return self.key("served:states")

    @property
    def fields_key(self) -> str:
        """Hash: what named payloads held besides their inputs, summed over every ingest
        process (`streamlearn.store.fields.FieldTotals`)."""
        return self.key("fields")
