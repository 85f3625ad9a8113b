"""The exceptions streamlearn raises: one root, a few leaves."""

from __future__ import annotations


class StreamlearnError(Exception):
    """Root of every error streamlearn raises on purpose."""


class ConfigError(StreamlearnError):
    """The configuration file or environment is invalid; the message names the field."""


class PayloadError(StreamlearnError):
    """An MQTT payload was rejected; the message is the reason dead-lettered or replied."""


class WeightsError(StreamlearnError):
    """A weights blob is malformed or does not fit the model; it is refused, never loaded."""


class NoWeightsError(StreamlearnError):
    """No weights have been published yet for the model."""
