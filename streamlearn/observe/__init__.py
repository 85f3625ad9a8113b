"""What the workers tell the world: liveness and readiness (`health`), Prometheus
metrics (`metrics`), retained presence markers (`presence`), and the status the
commands read back (`monitor`).
"""

from __future__ import annotations

from streamlearn._lazy import exports

__all__ = ["Health", "Presence", "StatusMonitor", "WorkerServer", "read_status"]

__getattr__ = exports(
    __name__,
    {
        "Health": "health",
        "WorkerServer": "metrics",
        "Presence": "presence",
        "StatusMonitor": "monitor",
        "read_status": "monitor",
    },
)
