"""kill -9 of the server's main process: nothing of it stays behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from serving.workers import shm
from tests.e2e.conftest import (
    XDIST_WORKER,
    Server,
    fresh_server,
    fresh_serving,
    stop_server,
    wait_ready,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc and shm")

CONFIG = """
[server]
log_level = "info"
[paddlex]
visualize = false
[workers]
devices = ["cpu"]
cpu_workers = 2
cpu_instances = 1
[engine]
cpu_backend = "fake"
"""

GONE_WITHIN_S = 20.0
"""A bound on the wait for processes to go, not a speed measurement."""


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name; None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text.rsplit(")", 1)[1].split()


def _children(pid: int) -> set[int]:
    children = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == pid:
                children.add(int(entry.name))
    return children


def _sweep_logged(factory: pytest.TempPathFactory, owner: str) -> bool:
    """Whether a server of this test run logged removing the segments of `owner` (`<pid>` or
    `<pid>x<token>`): the test's own server, or, on `pytest -n 2`, one that another worker
    started in the same moment and that swept first (every start sweeps every dead server's)."""
    root = factory.getbasetemp().parent if XDIST_WORKER else factory.getbasetemp()
    for log in root.glob("**/server.log"):
        for line in log.read_text(errors="replace").splitlines():
            if "left by dead servers" in line:
                owners = line.rsplit("(", 1)[-1].rstrip(')\n" ').split(", ")
                if owner in owners:
                    return True
    return False


def _gone(pid: int) -> bool:
    """Exited; a zombie (dead, waiting for whoever adopted it to reap it) counts as gone."""
    fields = _stat(pid)
    return fields is None or fields[0] == "Z"


def test_kill_9_takes_the_workers_and_the_resource_tracker_along(tmp_path) -> None:
    server = fresh_server(tmp_path, CONFIG)
    processes: set[int] = set()
    try:
        wait_ready(server)
        ready = httpx.get(f"{server.url}/readyz").json()
        workers = {d["pid"] for d in ready["devices"].values()} | set(ready["cpu_workers"]["pids"])
        assert len(workers) == 3, ready
        children = _children(server.process.pid)
        assert workers <= children
        trackers = {
            pid
            for pid in children - workers
            if b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
        }
        assert len(trackers) == 1, children
        processes = workers | trackers
        # A worker blocked on its pipe would see the parent go (EOF) and exit by itself; one busy
        # in a long batch or stuck would not. Stopped workers stand for those.
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)

        server.process.kill()
        server.process.wait()
        killed = time.monotonic()
        left = processes
        while left and time.monotonic() < killed + GONE_WITHIN_S:
            time.sleep(0.1)
            left = {pid for pid in left if not _gone(pid)}
        assert not left, f"still alive: {left} (workers {workers}, tracker {trackers})"
        print(f"all gone {time.monotonic() - killed:.2f} s after kill -9")  # -s shows it
    finally:
        for pid in processes:  # a failed run leaves nothing stopped behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stop_server(server)


SWEEP_CONFIG = CONFIG.replace("cpu_workers = 2", "cpu_workers = 1")
"""The sweeping server's: the sweep is its main process's, at start; one CPU worker is enough."""


@dataclass
class Orphans:
    """Segments left as dead servers leave them, and the one server started after them."""

    server: Server
    gone_pid: int
    """A reaped process's pid, owner of `gone_segment`."""
    gone_segment: Path
    orphan: Path
    """Under a prefix of this (live) process whose lock nobody holds: a dead start's."""
    dead_lock: Path
    dead_owner: str
    kept: Path
    """Under a prefix this process holds."""


@pytest.fixture(scope="module")
def orphans(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Orphans]:
    """Both kinds of leftovers, then one server: its start sweeps them all, so the two tests
    below share it (one start of ~8 CPU-s instead of two, 2026-12-07); neither changes what the
    server does for the other."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("needs /dev/shm")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid belongs to no process
    gone_segment = Path(f"/dev/shm/ocrsrv{gone.pid}_e2eorphan")
    gone_segment.write_bytes(b"\0" * 4096)
    # In a container each start is PID 1, so the pid of a server killed with -9 is alive again.
    # This process's pid stands for it: alive, but with a token whose lock nobody holds. A
    # segment under a prefix someone holds (here this process) stays.
    dead = shm.claim_prefix()
    held = shm.claim_prefix()
    orphan = Path(f"/dev/shm/{dead.prefix}e2eorphan")
    kept = Path(f"/dev/shm/{held.prefix}e2ekept")
    orphan.write_bytes(b"\0" * 4096)
    kept.write_bytes(b"\0" * 4096)
    os.close(dead.fd or -1)  # as the kernel does for a killed process
    token = dead.prefix.removeprefix(f"ocrsrv{os.getpid()}x").rstrip("_")
    try:
        with fresh_serving(tmp_path_factory.mktemp("sweep"), SWEEP_CONFIG) as server:
            yield Orphans(
                server=server,
                gone_pid=gone.pid,
                gone_segment=gone_segment,
                orphan=orphan,
                dead_lock=Path(dead.lock_path or "/nonexistent"),
                dead_owner=f"{os.getpid()}x{token}",
                kept=kept,
            )
    finally:
        for path in (gone_segment, orphan, kept):
            path.unlink(missing_ok=True)
        held.release()


def test_the_next_server_removes_segments_of_dead_servers(
    orphans: Orphans, tmp_path_factory: pytest.TempPathFactory
) -> None:
    assert not orphans.gone_segment.exists()
    assert _sweep_logged(tmp_path_factory, str(orphans.gone_pid)), orphans.server.log.read_text()


def test_the_next_server_removes_segments_of_a_dead_start_whose_pid_is_alive(
    orphans: Orphans, tmp_path_factory: pytest.TempPathFactory
) -> None:
    assert not orphans.orphan.exists()
    assert not orphans.dead_lock.exists()
    assert orphans.kept.exists()
    assert _sweep_logged(tmp_path_factory, orphans.dead_owner), orphans.server.log.read_text()
