"""The one report header every `ocr-bench` result carries: the machine, its CPU and what
OpenVINO can do on it, the commit measured, and how busy the machine was with other work.

A figure means little without them: the same server reads at different speeds on a CPU with
AMX, one with only avx512_bf16 and one with AVX2 alone, and on a machine shared with other work.
`CpuWatch` measures that other work instead of guessing it from the load average: the CPU
seconds the whole machine spent (`/proc/stat`, through psutil) less those of this process tree
(this process, its children reaped, and its live descendants), over the run's wall time, is the
mean number of cores other processes kept busy.
"""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from models.base import PredictorError
from models.onnx_predictor import import_engine
from serving.cpus import available_cpus

__all__ = [
    "CpuWatch",
    "Header",
    "commit",
    "cpu_flags",
    "cpu_model",
    "machine",
    "markdown",
    "openvino_capabilities",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
FLAGS_OF_INTEREST = (
    "avx2",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)
"""The CPU flags that change which precision and kernels OpenVINO and ONNX Runtime use."""


def _cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo; empty where there is none."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def cpu_model(path: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name ("AMD EPYC 9B14"), else the platform's processor string."""
    return _cpuinfo(path).get("model name") or platform.processor() or "unknown"


def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> list[str]:
    """Which of `FLAGS_OF_INTEREST` the CPU has, in that order."""
    have = set(_cpuinfo(path).get("flags", "").split())
    return [flag for flag in FLAGS_OF_INTEREST if flag in have]


def openvino_capabilities() -> list[str]:
    """OpenVINO's CPU `OPTIMIZATION_CAPABILITIES` on this machine ("BF16" among them where it
    computes in bf16); empty where OpenVINO is not installed."""
    try:
        openvino = import_engine("openvino", "openvino")
    except PredictorError:
        return []
    return list(openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def _openvino_version() -> str | None:
    try:
        openvino = import_engine("openvino", "openvino")
    except PredictorError:
        return None
    return str(openvino.get_version())


def commit(root: Path = REPO_ROOT) -> str:
    """The commit measured, "+ changes" where the work tree differs from it; "unknown" outside a
    git checkout."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} + changes" if status else head


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "host": platform.node(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_available": available_cpus(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu_flags": cpu_flags(),
        "openvino": _openvino_version(),
        "openvino_capabilities": openvino_capabilities(),
        "python": platform.python_version(),
    }


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy since boot (every core, idle and I/O wait
    left out)."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def _tree_s() -> float:
    """CPU seconds of this process, its reaped children (and theirs) and its live descendants."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    for child in psutil.Process().children(recursive=True):
        try:
            cpu = child.cpu_times()
        except psutil.Error:
            continue
        total += cpu.user + cpu.system + cpu.children_user + cpu.children_system
    return float(total)


@dataclass(slots=True)
class CpuWatch:
    """The load of a stretch of time: started by `start()`, read by `stop()`."""

    started: float = 0.0
    machine_s: float = 0.0
    tree_s: float = 0.0
    load_1m: float = 0.0

    @classmethod
    def start(cls) -> CpuWatch:
        """Start watching now."""
        return cls(time.monotonic(), _machine_busy_s(), _tree_s(), os.getloadavg()[0])

    def stop(self) -> dict[str, float]:
        """Since `start()`: wall seconds, the mean cores this process tree kept busy and those
        other processes did, and the 1-minute load average at either end."""
        wall_s = max(time.monotonic() - self.started, 1e-9)
        tree_s = _tree_s() - self.tree_s
        machine_s = _machine_busy_s() - self.machine_s
        return {
            "wall_s": round(wall_s, 1),
            "cores_busy_this_run": round(tree_s / wall_s, 2),
            "cores_busy_other": round(max(machine_s - tree_s, 0.0) / wall_s, 2),
            "load_1m_start": round(self.load_1m, 2),
            "load_1m_end": round(os.getloadavg()[0], 2),
        }


@dataclass(slots=True, kw_only=True)
class Header:
    """The report header: what ran, where, on which commit, and the machine's load."""

    scenario: str
    command: str
    started: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    commit: str = field(default_factory=commit)
    machine: dict[str, Any] = field(default_factory=machine)
    load: dict[str, float] = field(default_factory=dict)
    """`CpuWatch.stop()`'s figures for the whole run."""

    def as_dict(self) -> dict[str, Any]:
        """The header as JSON-able data."""
        return asdict(self)


def markdown(header: dict[str, Any]) -> str:
    """The header as the first lines of a Markdown report."""
    m = header["machine"]
    flags = " ".join(m["cpu_flags"]) or "none of " + " ".join(FLAGS_OF_INTEREST)
    caps = " ".join(m["openvino_capabilities"]) or "-"
    openvino = f"OpenVINO {m['openvino']}: {caps}" if m.get("openvino") else "no OpenVINO"
    lines = [
        f"# ocr-bench {header['scenario']}, {header['started']}",
        "",
        f"- command: `{header['command']}`",
        f"- commit: {header['commit']}",
        f"- machine: {m['host']}, {m['cpu_model']}, {m['cpu_count']} CPUs "
        f"({m['cpus_available']} available to this run), {m['memory_gib']} GiB; CPU flags: "
        f"{flags}; {openvino}",
    ]
    load = header.get("load")
    if load:
        lines.append(
            f"- load: other processes kept {load['cores_busy_other']:.2f} cores busy on average "
            f"over the run's {load['wall_s']:.0f} s (this run {load['cores_busy_this_run']:.2f}); "
            f"1-minute load average {load['load_1m_start']:.2f} at the start, "
            f"{load['load_1m_end']:.2f} at the end"
        )
    return "\n".join(lines) + "\n"
