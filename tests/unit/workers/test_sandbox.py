"""`serving.workers.sandbox` on real spawned processes: the environment a child gets, and the
limits it sets on itself."""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from multiprocessing.connection import Connection

import numpy as np

from serving.workers.sandbox import (
    EnvSpawnProcess,
    WorkerLimits,
    device_environ,
    scrubbed_environ,
)
from serving.workers.supervisor import SPAWN

PR_GET_DUMPABLE = 3


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


def test_device_workers_keep_the_engines_variables_and_no_secret() -> None:
    environ = {
        "PATH": "/usr/bin",
        "CUDA_VISIBLE_DEVICES": "1",
        "FLAGS_fraction_of_gpu_memory_to_use": "0.5",
        "OCR_FAKE_LATENCY_S": "0.1",
        "OCR_REPLAY_DET_MAPS": "/work/det-maps.npz",
        "OCR_API_KEYS": "secret",
        "OCR_JOBS__STORE": "postgresql://u:pw@db/ocr",
        "PGPASSWORD": "pw",
        "CLOUD_TOKEN": "x",
    }
    assert device_environ(environ) == {
        "PATH": "/usr/bin",
        "CUDA_VISIBLE_DEVICES": "1",
        "FLAGS_fraction_of_gpu_memory_to_use": "0.5",
        "OCR_FAKE_LATENCY_S": "0.1",
        "OCR_REPLAY_DET_MAPS": "/work/det-maps.npz",
    }


def test_the_secrets_read_are_taken_out_of_the_environment() -> None:
    # Imported here: the spawned children of this module's other tests import it, and the config
    # brings OpenCV, which adds variables to their environment.
    from serving.config import AuthConfig
    from serving.secret_env import take_secrets

    environ = {
        "PATH": "/usr/bin",
        "MY_KEYS": "k1,k2",
        "OCR_JOBS__STORE": "postgresql://u:pw@db/ocr",
        "OCR_CONFIG": "/etc/ocr/config.toml",
        "OCR_FAKE_LATENCY_S": "0",
        "PGPASSWORD": "pw",  # libpq reads it at each connect: kept (no worker gets it)
    }
    taken = take_secrets(environ, AuthConfig(api_keys_env="MY_KEYS"))
    assert taken == {"MY_KEYS": "k1,k2", "OCR_JOBS__STORE": "postgresql://u:pw@db/ocr"}
    assert environ == {
        "PATH": "/usr/bin",
        "OCR_CONFIG": "/etc/ocr/config.toml",
        "OCR_FAKE_LATENCY_S": "0",
        "PGPASSWORD": "pw",
    }


def _report_sealed(conn: Connection) -> None:
    WorkerLimits(address_space_headroom_bytes=256 << 20, open_files=64).seal()
    WorkerLimits(address_space_headroom_bytes=256 << 20, open_files=64).apply()
    libc = ctypes.CDLL(None)
    conn.send(libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))
    conn.send([resource.getrlimit(kind) for kind in (resource.RLIMIT_AS, resource.RLIMIT_NOFILE)])
    try:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        conn.send("lifted")
    except (ValueError, OSError):
        conn.send("refused")


def test_a_worker_is_undumpable_and_its_limits_are_hard() -> None:
    """Issue 49: a worker's limits were soft (`setrlimit(RLIMIT_AS, (-1, -1))` lifted them) and
    its /proc files readable by its uid. (As root, CAP_SYS_RESOURCE would still lift them: this
    runs the worker under the limits it sets, and checks soft == hard.)"""
    parent, child = SPAWN.Pipe()
    process = SPAWN.Process(target=_report_sealed, args=(child,))
    process.start()
    child.close()
    assert parent.recv() == 0  # PR_GET_DUMPABLE: off
    for soft, hard in parent.recv():
        assert soft == hard != resource.RLIM_INFINITY
    lifted = parent.recv()
    process.join(30)
    if "cap_sys_resource" not in _capabilities():
        assert lifted == "refused"


def _capabilities() -> str:
    """This process's effective capabilities, as words ('' when it has none we look for)."""
    with open("/proc/self/status") as status:
        line = next(row for row in status if row.startswith("CapEff:"))
    return "cap_sys_resource" if int(line.split()[1], 16) & (1 << 24) else ""
