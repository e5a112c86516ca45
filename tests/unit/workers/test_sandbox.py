"""`serving.workers.sandbox` on real spawned processes: the environment a child gets, and the
limits it sets on itself."""

from __future__ import annotations

import os
import signal
from multiprocessing.connection import Connection

import numpy as np

from serving.workers.sandbox import EnvSpawnProcess, WorkerLimits, scrubbed_environ
from serving.workers.supervisor import SPAWN


def test_scrubbed_environ_keeps_only_what_workers_read() -> None:
    environ = {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "OPENCV_IO_MAX_IMAGE_PIXELS": "100",
        "OMP_NUM_THREADS": "1",
        "OCR_API_KEYS": "secret",
        "OCR_JOBS__STORE": "postgresql://u:pw@db/ocr",
        "AWS_SECRET_ACCESS_KEY": "x",
        "PGPASSWORD": "pw",
    }
    assert scrubbed_environ(environ) == {
        "PATH": "/usr/bin",
        "LC_ALL": "C.UTF-8",
        "OPENCV_IO_MAX_IMAGE_PIXELS": "100",
        "OMP_NUM_THREADS": "1",
    }


def _report_environ(conn: Connection) -> None:
    conn.send(dict(os.environ))
    with open(f"/proc/{os.getpid()}/environ", "rb") as raw:
        conn.send(raw.read())


def test_child_gets_the_given_environment_only() -> None:
    parent, child = SPAWN.Pipe()
    environ = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    process = EnvSpawnProcess(target=_report_environ, args=(child,), environ=environ)
    process.start()
    child.close()
    seen, raw = parent.recv(), parent.recv()
    process.join(30)
    assert process.exitcode == 0
    assert environ.items() <= seen.items()
    assert not set(seen) - {*environ, "LC_CTYPE"}  # Python's locale coercion may add LC_CTYPE
    assert sorted(raw.split(b"\0")[:-1]) == sorted(f"{k}={v}".encode() for k, v in environ.items())


def _spin_past_cpu_limit(conn: Connection) -> None:
    WorkerLimits(task_cpu_s=1).apply()
    conn.send("armed")
    while True:
        pass


def test_a_call_past_its_cpu_time_is_killed() -> None:
    parent, child = SPAWN.Pipe()
    process = SPAWN.Process(target=_spin_past_cpu_limit, args=(child,))
    process.start()
    child.close()
    assert parent.recv() == "armed"
    process.join(120)
    assert process.exitcode == -signal.SIGXCPU


def _allocate_past_address_space(conn: Connection) -> None:
    WorkerLimits(address_space_headroom_bytes=256 << 20, open_files=64).apply()
    try:
        np.ones(1 << 30, dtype=np.uint8)
    except MemoryError:
        conn.send("refused")
    conn.send(int(np.ones(1 << 20, dtype=np.uint8).sum()))  # and the process goes on
    conn.send(len(os.listdir("/proc/self/fd")))


def test_an_allocation_past_the_address_space_fails_alone() -> None:
    parent, child = SPAWN.Pipe()
    process = SPAWN.Process(target=_allocate_past_address_space, args=(child,))
    process.start()
    child.close()
    assert parent.recv() == "refused"
    assert parent.recv() == 1 << 20
    assert parent.recv() <= 64
    process.join(30)
    assert process.exitcode == 0
