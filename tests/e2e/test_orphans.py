"""kill -9 of the server's main process: nothing of it stays behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from serving.workers import shm
from tests.e2e.conftest import XDIST_WORKER, fresh_server, stop_server, wait_ready

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


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
def test_the_next_server_removes_segments_of_dead_servers(tmp_path, tmp_path_factory) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid belongs to no process
    segment = Path(f"/dev/shm/ocrsrv{gone.pid}_e2eorphan")
    segment.write_bytes(b"\0" * 4096)
    server = fresh_server(tmp_path, CONFIG)
    try:
        wait_ready(server)
        assert not segment.exists()
        assert _sweep_logged(tmp_path_factory, str(gone.pid)), server.log.read_text()
    finally:
        segment.unlink(missing_ok=True)
        stop_server(server)


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
def test_the_next_server_removes_segments_of_a_dead_start_whose_pid_is_alive(
    tmp_path, tmp_path_factory
) -> None:
    # In a container each start is PID 1, so the pid of a server killed with -9 is alive again.
    # This test's own pid stands for it: alive, but with a token whose lock nobody holds. A
    # segment under a prefix someone holds (here this test) stays.
    dead = shm.claim_prefix()
    held = shm.claim_prefix()
    orphan = Path(f"/dev/shm/{dead.prefix}e2eorphan")
    kept = Path(f"/dev/shm/{held.prefix}e2ekept")
    orphan.write_bytes(b"\0" * 4096)
    kept.write_bytes(b"\0" * 4096)
    os.close(dead.fd or -1)  # as the kernel does for a killed process
    server = fresh_server(tmp_path, CONFIG)
    try:
        wait_ready(server)
        assert not orphan.exists()
        assert not Path(dead.lock_path or "/nonexistent").exists()
        assert kept.exists()
        token = dead.prefix.removeprefix(f"ocrsrv{os.getpid()}x").rstrip("_")
        assert _sweep_logged(tmp_path_factory, f"{os.getpid()}x{token}"), server.log.read_text()
    finally:
        orphan.unlink(missing_ok=True)
        kept.unlink(missing_ok=True)
        held.release()
        stop_server(server)
