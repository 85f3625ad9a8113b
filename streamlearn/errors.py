"""The exceptions streamlearn raises: one root, a few leaves."""

from __future__ import annotations


class StreamlearnError(Exception):
    """Root of every error streamlearn raises on purpose."""


class ConfigError(StreamlearnError):
    """The configuration file or environment is invalid; the message names the field."""


class PayloadError(StreamlearnError):
    """An MQTT payload was rejected; the message is the reason dead-lettered or replied.

    `kind` is a label with few values (`wrong_shape`, `unknown_field`, ...): what metrics
    count dead letters by and what a dead letter records, so that nobody has to match the
    reason's text.
    """

    def __init__(self, reason: str, kind: str = "other") -> None:
        super().__init__(reason)
        self.kind = kind


class WeightsError(StreamlearnError):
    """A weights blob is malformed or does not fit the model; it is refused, never loaded."""


class NoWeightsError(StreamlearnError):
    """No weights have been published yet for the model."""


class LeaseLost(StreamlearnError):
    """A learner no longer holds its lease (`streamlearn.store.lease`): it may not publish
    nor checkpoint, and goes back to waiting for the lease."""
