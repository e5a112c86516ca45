"""How many CPUs this process may use: what every default that counts cores counts.

`os.cpu_count()` is the host's: on a 64-core node, a pod limited to 8 CPUs (or pinned to 8 by
its cpuset) started 64 CPU workers and gave each OpenVINO worker 64 threads. The cores this process
may run on are its affinity (`sched_getaffinity`: cpusets, `taskset`, `docker run --cpuset-cpus`),
and the time it may use is its cgroup's quota (`cpu.max` in cgroup v2, `cpu.cfs_quota_us` /
`cpu.cfs_period_us` in v1: `docker run --cpus`, a Kubernetes CPU limit), rounded up.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def available_cpus(cgroup_root: Path = CGROUP_ROOT) -> int:
    """The CPUs this process may use: its affinity's, at most its cgroup's quota (rounded up);
    at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def cgroup_cpu_quota(cgroup_root: Path = CGROUP_ROOT) -> float | None:
    """The cgroup's CPU quota in CPUs (e.g. 2.5), or None where there is none."""
    with contextlib.suppress(OSError, ValueError):  # cgroup v2: "max 100000" or "250000 100000"
        quota, period = (cgroup_root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else _ratio(int(quota), int(period))
    with contextlib.suppress(OSError, ValueError):  # cgroup v1: -1 when unlimited
        quota_us = int((cgroup_root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((cgroup_root / "cpu" / "cpu.cfs_period_us").read_text())
        return _ratio(quota_us, period_us)
    return None


def _ratio(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None
