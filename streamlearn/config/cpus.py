"""The CPUs this process may use: its affinity, bounded by its cgroup's CPU quota.

A container's CPU limit is a quota of CPU time (cgroup v2 `cpu.max`, v1
`cpu.cfs_quota_us` / `cpu.cfs_period_us`), not fewer cores: `os.cpu_count()` and the
affinity still show the host's, and TensorFlow sizes its thread pools by them
(tensorflow#17206). Threads sized to the host's cores on a 1-CPU pod are throttled in turn.
`STREAMLEARN_CPU_QUOTA` (a number of CPUs) stands in for the cgroup's quota.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from streamlearn.config import environment
from streamlearn.errors import ConfigError

CGROUP = Path("/sys/fs/cgroup")
BLAS_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class Cpus:
    """How many CPUs the process may keep busy (`usable`), and what said so (`source`).

    >>> Cpus(1, "cgroup cpu.max 100000/100000").status()
    {'usable': 1, 'from': 'cgroup cpu.max 100000/100000'}
    """

    usable: int
    source: str

    def status(self) -> dict[str, int | str]:
        """As a worker's status shows it: `{"usable": 1, "from": "cgroup cpu.max ..."}`."""
        return {"usable": self.usable, "from": self.source}


def usable_cpus(cgroup: Path = CGROUP) -> Cpus:
    """min(affinity, ceil(quota)): the quota from `STREAMLEARN_CPU_QUOTA`, else the cgroup
    (v2, then v1) under `cgroup`; none set, the affinity alone. A bad variable is a
    ConfigError naming it."""
    cores = affinity()
    given = os.environ.get(environment.CPU_QUOTA)
    quota: float | None
    if given is not None:
        quota, source = _parse_given(given), f"{environment.CPU_QUOTA}={given}"
    else:
        quota, source = cgroup_quota(cgroup)
    if quota is None or math.ceil(quota) >= cores:
        return Cpus(cores, f"affinity ({cores} cores); {source}")
    return Cpus(max(1, math.ceil(quota)), source)


def blas_environment(cgroup: Path = CGROUP) -> dict[str, str]:
    """The variables that size numpy's BLAS threads (OpenBLAS, MKL: its matrix products)
    to the usable CPUs, those not set already, for `os.environ.update` in a worker's module
    before numpy loads: the library reads them once, as it loads. Nothing once numpy is
    loaded (too late to change)."""
    if "numpy" in sys.modules:
        return {}
    usable = str(usable_cpus(cgroup).usable)
    return {name: usable for name in BLAS_VARIABLES if name not in os.environ}


def affinity() -> int:
    """The cores the scheduler may run this process on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cgroup_quota(root: Path = CGROUP) -> tuple[float | None, str]:
    """The cgroup's CPU quota in CPUs (None: unlimited or not found), and where it was read.

    v2 `cpu.max` is "QUOTA PERIOD" ("max 100000": unlimited); v1 has the two numbers in
    `cpu/cpu.cfs_quota_us` and `cpu/cpu.cfs_period_us` (quota -1: unlimited).
    """
    try:
        v2 = root / "cpu.max"
        if v2.is_file():
            quota, _, period = v2.read_text().strip().partition(" ")
            return _ratio(quota, period, f"cgroup cpu.max {quota}/{period}")
        for v1 in (root / "cpu", root / "cpu,cpuacct", root):
            quota_file, period_file = v1 / "cpu.cfs_quota_us", v1 / "cpu.cfs_period_us"
            if quota_file.is_file() and period_file.is_file():
                quota, period = quota_file.read_text().strip(), period_file.read_text().strip()
                return _ratio(quota, period, f"cgroup cpu.cfs_quota_us {quota}/{period}")
    except OSError as exc:  # unreadable: as if unlimited, and said
        return None, f"cgroup unreadable: {exc}"
    return None, "no cgroup CPU quota"


def _ratio(quota: str, period: str, source: str) -> tuple[float | None, str]:
    """quota / period in CPUs; None for "max", -1 (unlimited) or what is not a number."""
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None, source
    return (q / p if q > 0 and p > 0 else None), source


def _parse_given(value: str) -> float:
    try:
        quota = float(value)
    except ValueError:
        quota = -1
    if not quota > 0 or math.isinf(quota):
        raise ConfigError(f"{environment.CPU_QUOTA} must be a number of CPUs > 0, got {value!r}")
    return quota
