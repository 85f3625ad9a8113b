"""Kubernetes names for what a config names: a model `Room_2` may be a TOML table's name,
not an object's. A name that is already a DNS-1123 label stays as it is; any other is
lowered, every other character made `-`, and suffixed with a hash of the original, so that
`Room_2` and `room-2` never share a name.
"""

from __future__ import annotations

import hashlib
import re

# A StatefulSet's pods add `-N`, and its controller-revision-hash label `-<10 chars>`, to
# its name within a label's 63: every name here stays within 52.
MAX_NAME = 52
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def dns_name(*parts: str) -> str:
    """`parts` joined by `-` as a DNS-1123 label of at most `MAX_NAME` characters.

    >>> dns_name("actor", "demo")
    'actor-demo'
    >>> dns_name("actor", "Room_2")
    'actor-room-2-104aa'
    >>> len(dns_name("learner", "m" * 64, "v" * 64)) <= MAX_NAME
    True
    """
    joined = "-".join(parts)
    name = re.sub(r"[^a-z0-9-]", "-", joined.lower()).strip("-")
    if name == joined and len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()[:5]
    return f"{name[: MAX_NAME - 6].rstrip('-')}-{digest}".lstrip("-")


def content_name(prefix: str, data: dict[str, str]) -> str:
    """`prefix` and a hash of `data`, as kustomize names a generated ConfigMap: a change of
    content is a new name, which rolls the pods that mount it.

    >>> content_name("streamlearn-config", {"streamlearn.toml": ""})
    'streamlearn-config-1e05fcc10d'
    """
    digest = hashlib.sha256(repr(sorted(data.items())).encode()).hexdigest()[:10]
    return f"{prefix}-{digest}"


def is_dns_label(name: str) -> bool:
    """A DNS-1123 label: what a Service, and every name here, must be.

    >>> is_dns_label("ingest-room-2"), is_dns_label("Room_2"), is_dns_label("a" * 64)
    (True, False, False)
    """
    return len(name) <= 63 and _LABEL.match(name) is not None
