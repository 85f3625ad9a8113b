"""`streamlearn deploy k8s`: a self-contained Kubernetes install of a config's models,
rendered from the source tree's deploy files (`templates`): each model's roles (`roles`),
under names Kubernetes takes (`names`), the broker and Redis (`servers`), the Prometheus
Operator's and Grafana's objects (`monitoring`), put together by `install`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.stack.k8s.install import Install, render, to_yaml, write


__all__, __getattr__ = exports(
    __name__,
    {
        "Install": "install",
        "render": "install",
        "to_yaml": "install",
        "write": "install",
    },
)
