"""The CPUs a process may use (`serving.cpus`): affinity, and the cgroup's quota over it."""

from __future__ import annotations

import os
from pathlib import Path

from serving.cpus import available_cpus, cgroup_cpu_quota


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


def test_cgroup_v2_quota_rounds_up_and_caps_the_affinity(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(tmp_path) == 1.5
    assert available_cpus(tmp_path) == min(_affinity(), 2)
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a CPU: still one
    assert available_cpus(tmp_path) == 1


def test_no_quota_leaves_the_affinity(tmp_path: Path) -> None:
    assert cgroup_cpu_quota(tmp_path) is None  # no cgroup files at all
    assert available_cpus(tmp_path) == _affinity()
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(tmp_path) is None
    assert available_cpus(tmp_path) == _affinity()


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(tmp_path) is None
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    assert cgroup_cpu_quota(tmp_path) == 1.0
    assert available_cpus(tmp_path) == 1
