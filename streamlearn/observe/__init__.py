"""What the workers tell the world: liveness and readiness (`health`), Prometheus
metrics (`metrics`, each declared in `catalog`) on a bounded HTTP server (`httpd`, also the
dashboard's), retained presence markers (`presence`), the broker's delay of a QoS 1 request's reply
(`broker_delay`), the status the commands read back (`monitor`), and the troubles a user
meets, each with what it means and what to do (`troubles`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.observe.health import Health
    from streamlearn.observe.metrics import WorkerServer
    from streamlearn.observe.monitor import StatusMonitor, read_status
    from streamlearn.observe.presence import Presence


__all__, __getattr__ = exports(
    __name__,
    {
        "Health": "health",
        "WorkerServer": "metrics",
        "Presence": "presence",
        "StatusMonitor": "monitor",
        "read_status": "monitor",
    },
)
