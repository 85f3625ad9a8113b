"""`streamlearn up`: the local stack. The supervisor of every role's processes
(`supervisor`), the embedded `redis-server` and `mosquitto` (`embedded`), the run's logs
(`runlog`), the dashboard (`dashboard`, `static/`) and the demo stream (`demo`). The run
file it writes, which the commands and `Client()` read, is `streamlearn.config.runfile`.
The same stack on a cluster is `k8s` (`streamlearn deploy k8s`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamlearn._lazy import exports

if TYPE_CHECKING:
    from streamlearn.stack.dashboard import Dashboard
    from streamlearn.stack.demo import DemoStream
    from streamlearn.stack.embedded import mosquitto, redis_server
    from streamlearn.stack.supervisor import Stack


__all__, __getattr__ = exports(
    __name__,
    {
        "Stack": "supervisor",
        "DemoStream": "demo",
        "Dashboard": "dashboard",
        "redis_server": "embedded",
        "mosquitto": "embedded",
    },
)
