"""Soak sampling: memory and open files of every server process, and its shared-memory segments.

One `Sample` is a snapshot of the whole server: the main process and all its descendants (via
psutil), each with its role, RSS, USS and open file descriptors, plus how many POSIX shared-memory
segments carry the server's name prefix (`serving.workers.shm.server_prefix`).

A device worker's RSS swings by 10 % from one batch to the next (activations come and go), so
between snapshots an `RssTracker` reads every process's RSS often (a cheap read of
/proc/<pid>/statm) and each snapshot carries the mean, least and most RSS since the last one:
the mean is what growth is judged on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from serving.workers.shm import server_prefix

__all__ = [
    "SHM_DIR",
    "ProcessSample",
    "RssTracker",
    "Sample",
    "Sampler",
    "count_segments",
    "role_of",
    "roles_from_readyz",
    "sample_server",
]

SHM_DIR = Path("/dev/shm")
"""Where Linux keeps POSIX shared-memory segments, one file each."""


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process at one instant.

    Attributes:
        pid: Its process id.
        role: ``main``, ``device <name>``, ``cpu-worker <n>``, ``resource-tracker`` or ``child``.
        rss_bytes: Resident set size at the snapshot.
        rss_mean_bytes: Mean RSS over the reads since the previous snapshot and this one.
        rss_min_bytes: Least of those reads.
        rss_max_bytes: Most of those reads.
        uss_bytes: Unique set size (memory freed if it exited); ``None`` where it can't be read.
        fds: Open file descriptors.
    """

    pid: int
    role: str
    rss_bytes: int
    rss_mean_bytes: float
    rss_min_bytes: int
    rss_max_bytes: int
    uss_bytes: int | None
    fds: int


@dataclass(frozen=True, slots=True)
class Sample:
    """The server at one instant, ``t_s`` seconds after traffic started (negative: before)."""

    t_s: float
    segments: int
    processes: tuple[ProcessSample, ...]

    @property
    def rss_mean_bytes(self) -> float:
        """Mean RSS of all the server's processes together (sum of their means)."""
        return sum(p.rss_mean_bytes for p in self.processes)


class RssTracker:
    """Reads the RSS of known processes whenever asked; `take` returns and resets the reads."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}
        self._reads: dict[int, list[int]] = {}

    def track(self, pids: Iterable[int]) -> None:
        """Read these processes from now on (and forget any others)."""
        wanted = set(pids)
        for pid in set(self._procs) - wanted:
            del self._procs[pid]
        for pid in wanted - set(self._procs):
            try:
                self._procs[pid] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                continue

    def read(self) -> None:
        """One read of every tracked process; gone ones are skipped."""
        for pid, proc in self._procs.items():
            try:
                self._reads.setdefault(pid, []).append(int(proc.memory_info().rss))
            except psutil.Error:
                continue

    def take(self, pid: int) -> list[int]:
        """The reads of ``pid`` since the last `take` of it."""
        return self._reads.pop(pid, [])


def count_segments(prefix: str, shm_dir: Path = SHM_DIR) -> int:
    """Shared-memory segments in ``shm_dir`` whose name starts with ``prefix``."""
    try:
        with os.scandir(shm_dir) as entries:
            return sum(1 for entry in entries if entry.name.startswith(prefix))
    except FileNotFoundError:
        return 0


def roles_from_readyz(body: Mapping[str, Any]) -> dict[int, str]:
    """Pid -> role from the server's ``GET /readyz`` body (device workers and CPU workers)."""
    roles: dict[int, str] = {}
    for name, device in sorted(body.get("devices", {}).items()):
        if isinstance(device, Mapping) and isinstance(device.get("pid"), int):
            roles[device["pid"]] = f"device {name}"
    pids = body.get("cpu_workers", {}).get("pids", [])
    for n, pid in enumerate(sorted(p for p in pids if isinstance(p, int)), start=1):
        roles[pid] = f"cpu-worker {n}"
    return roles


def role_of(pid: int, root_pid: int, cmdline: list[str], known: Mapping[int, str]) -> str:
    """The role of ``pid``: the main process, a role the server named, or one from its cmdline."""
    if pid == root_pid:
        return "main"
    if pid in known:
        return known[pid]
    if any("resource_tracker" in part for part in cmdline):
        return "resource-tracker"
    return "child"


def _one(
    proc: psutil.Process, root_pid: int, known: Mapping[int, str], reads: list[int]
) -> ProcessSample | None:
    try:
        with proc.oneshot():
            cmdline = proc.cmdline()
            rss = int(proc.memory_info().rss)
            fds = proc.num_fds()
            try:
                # USS reads /proc/<pid>/smaps: tens of milliseconds for a Paddle process.
                uss: int | None = int(proc.memory_full_info().uss)
            except psutil.AccessDenied:
                uss = None
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    reads = [*reads, rss]
    return ProcessSample(
        pid=proc.pid,
        role=role_of(proc.pid, root_pid, cmdline, known),
        rss_bytes=rss,
        rss_mean_bytes=sum(reads) / len(reads),
        rss_min_bytes=min(reads),
        rss_max_bytes=max(reads),
        uss_bytes=uss,
        fds=fds,
    )


def sample_server(
    root_pid: int,
    prefix: str,
    t_s: float,
    known: Mapping[int, str],
    tracker: RssTracker | None = None,
    shm_dir: Path = SHM_DIR,
) -> Sample:
    """Snapshot the process tree under ``root_pid`` and its segments (no processes if gone).

    With a ``tracker``, each process's RSS statistics include the tracker's reads since the last
    snapshot, and the tracker then follows exactly the processes found now.
    """
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    found = [
        _one(proc, root_pid, known, tracker.take(proc.pid) if tracker else []) for proc in procs
    ]
    processes = tuple(sorted((p for p in found if p is not None), key=lambda p: p.pid))
    if tracker is not None:
        tracker.track(p.pid for p in processes)
    return Sample(t_s=t_s, segments=count_segments(prefix, shm_dir), processes=processes)


class Sampler:
    """A snapshot every `interval_s` and RSS reads every `read_s` between, until told to stop."""

    def __init__(self, pid: int, roles: dict[int, str], interval_s: float, read_s: float) -> None:
        self._pid = pid
        self._prefix = server_prefix(pid)
        self._roles = roles
        self._interval_s = interval_s
        self._read_s = min(read_s, interval_s)
        self._tracker = RssTracker()
        self.samples: list[Sample] = []

    def _snapshot(self, t_s: float) -> None:
        sample = sample_server(self._pid, self._prefix, t_s, self._roles, self._tracker)
        self.samples.append(sample)

    async def run(self, started: float, stop: asyncio.Event) -> None:
        """Sample from `started` (monotonic) on; a last snapshot as soon as `stop` is set."""
        next_snapshot_s = 0.0
        reads = 0
        while True:
            # Read once: a stop set while a scheduled snapshot runs still earns a last one after it.
            stopping = stop.is_set()
            now_s = time.monotonic() - started
            if now_s >= next_snapshot_s or stopping:
                await asyncio.to_thread(self._snapshot, now_s)
                next_snapshot_s += self._interval_s
            else:
                await asyncio.to_thread(self._tracker.read)
            if stopping:
                return
            reads += 1
            # The next read on the schedule (no drift), or at once when traffic ends.
            delay_s = max(0.0, started + reads * self._read_s - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay_s)
