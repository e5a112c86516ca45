"""What a worker may hold: an environment without the server's secrets, resource limits, and
memory no other process of its uid can read.

CPU workers decode untrusted files (PDFs through pdfium, images through OpenCV and PIL), so a
decoder bug is the likeliest way in. Before, they inherited the server's whole environment
(`OCR_API_KEYS`, `OCR_JOBS__STORE` with its PostgreSQL password, any cloud credentials) and ran
with no limits (issue 37, item 10). Now:

- A worker is spawned with an environment built from an allow-list (`ALLOWED`, `ALLOWED_PREFIXES`):
  what Python, the C libraries and the thread pools read, nothing of the server's configuration.
  multiprocessing's spawn passes the parent's environment whole, so the child is started through
  `env -i NAME=VALUE... python ...` (`EnvSpawnProcess`): its `/proc/<pid>/environ` holds the
  allowed names only.
- Once started, it caps its own address space (its size then plus `address_space_headroom_bytes`:
  an allocation past it raises `MemoryError` in the call, the worker lives on), its open files and
  core dumps (none: a core would write a tenant's document to disk), and before each call its CPU
  time (`task_cpu_s` more than it has used: a decoder that spins is killed by `SIGXCPU`, and the
  pool's retry policy answers its caller).

Issue 49 found the rest of the way in: a worker runs as the server's uid, so a hijacked one read
`/proc/<ppid>/environ` (`OCR_API_KEYS`, the PostgreSQL password) and lifted its own limits
(`setrlimit(RLIMIT_AS, (-1, -1))`: they were soft). Now:

- Every process of the server (main, CPU and device workers) turns `PR_SET_DUMPABLE` off
  (`forbid_inspection`): its `/proc/<pid>/environ`, `mem`, `fd`, `maps` and ptrace are refused
  to other processes of its uid (only root with `CAP_SYS_PTRACE` still may); no core dumps.
- Device workers are spawned with an allow-list too (`device_environ`: the CPU workers' and the
  engines' families: CUDA, Paddle's `FLAGS_`, OpenVINO, ONNX Runtime, torch), and the resource
  tracker with the CPU workers' (`start_resource_tracker`); the variables the server has read
  into its config are taken out of its own environment (`serving.secret_env`).
- Address space, open files and core dumps are hard limits (soft == hard): an unprivileged
  process can lower a hard limit, never raise it. CPU time stays a soft limit, moved before each
  call (a hard one could not be moved); a worker that lifts it is still killed by the pool's
  wall clock (its caller's deadline, then `abandon_grace_s`).
"""

from __future__ import annotations

import ctypes
import io
import logging
import os
import resource
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing import popen_spawn_posix, reduction, spawn, util
from multiprocessing.context import SpawnProcess, set_spawning_popen
from typing import Any

logger = logging.getLogger(__name__)

ALLOWED = frozenset(
    (
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
        "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
        "PYTHONPYCACHEPREFIX", "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8",
        "PYTHONFAULTHANDLER",
        "VIRTUAL_ENV", "LD_LIBRARY_PATH", "GLIBC_TUNABLES",
    )
)  # fmt: skip
"""Environment variables a CPU worker keeps: Python's, the locale's, the loader's."""
ALLOWED_PREFIXES = ("LC_", "OPENCV_", "OMP_", "MKL_", "OPENBLAS_", "MALLOC_", "COVERAGE_")
"""Families a CPU worker keeps: OpenCV's pixel cap, thread pools' sizes, malloc's tuning."""
DEVICE_PREFIXES = (
    "CUDA_", "NVIDIA_", "NCCL_", "CUDNN_", "CUBLAS_", "TORCH_", "TORCHINDUCTOR_", "PYTORCH_",
    "TRITON_", "FLAGS_", "GLOG_", "PADDLE_", "OV_", "OPENVINO_", "ORT_", "KMP_", "DNNL_",
    "ONEDNN_", "TBB_", "XDG_", "OCR_FAKE_", "OCR_REPLAY_",
)  # fmt: skip
"""Families a device worker keeps besides `ALLOWED_PREFIXES`: the GPU runtimes', the engines'
(Paddle's gflags are `FLAGS_*`) and their caches'; `OCR_FAKE_*` are the test backends' settings
(`tests/fakes/predictors.py`) and `OCR_REPLAY_*` the GPU check's replaying backend's
(`loadtest.gpu.check`), never a secret."""
PR_SET_DUMPABLE = 4
"""From <linux/prctl.h>."""


def scrubbed_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with only the names a CPU worker keeps."""
    return {
        name: value
        for name, value in environ.items()
        if name in ALLOWED or name.startswith(ALLOWED_PREFIXES)
    }


def device_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with only the names a device worker keeps (`DEVICE_PREFIXES`)."""
    return {
        name: value
        for name, value in environ.items()
        if name in ALLOWED or name.startswith(ALLOWED_PREFIXES + DEVICE_PREFIXES)
    }


def forbid_inspection() -> bool:
    """Turn this process's `PR_SET_DUMPABLE` off: other processes of its uid can no longer read
    its `/proc/<pid>/environ`, `mem`, `maps` or `fd`, nor ptrace it, and it writes no core dump.
    An exec turns it on again, so each process calls this itself. Returns whether it is off
    (False, with a warning, where prctl failed; a no-op off Linux)."""
    if not os.path.exists("/proc/self"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        logger.warning("prctl(PR_SET_DUMPABLE, 0) failed: %s", os.strerror(ctypes.get_errno()))
        return False
    return True


def start_resource_tracker(environ: Mapping[str, str]) -> None:
    """Start multiprocessing's resource tracker (which every spawned worker shares) with
    `environ` instead of ours: it would otherwise keep the whole environment, readable from
    `/proc/<pid>/environ` by any process of our uid (it execs, so it cannot forbid that itself).
    Call at start, before other threads run: the environment is swapped while it starts."""
    from multiprocessing import resource_tracker

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environ)
    try:
        resource_tracker.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(saved)


class _EnvPopen(popen_spawn_posix.Popen):
    """multiprocessing's spawn, with the child's environment given instead of inherited.

    `_launch` is the standard library's (Python 3.11-3.13), but the command runs under
    `env -i` with `environ`: `util.spawnv_passfds` has no environment argument."""

    _fds: list[int]

    def __init__(self, process_obj: Any, environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(process_obj)

    def _launch(self, process_obj: Any) -> None:
        from multiprocessing import resource_tracker

        tracker_fd = resource_tracker.getfd()
        self._fds.append(tracker_fd)  # type: ignore[arg-type]
        prep_data = spawn.get_preparation_data(process_obj._name)
        fp = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, fp)
            reduction.dump(process_obj, fp)
        finally:
            set_spawning_popen(None)
        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            cmd = spawn.get_command_line(tracker_fd=tracker_fd, pipe_handle=child_r)
            self._fds.extend([child_r, child_w])
            env = shutil.which("env") or "/usr/bin/env"
            pairs = [f"{name}={value}" for name, value in self._environ.items()]
            self.pid = util.spawnv_passfds(os.fsencode(env), [env, "-i", *pairs, *cmd], self._fds)
            self.sentinel = parent_r
            with open(parent_w, "wb", closefd=False) as f:
                f.write(fp.getbuffer())
        finally:
            opened = [fd for fd in (parent_r, parent_w) if fd is not None]
            self.finalizer = util.Finalize(self, util.close_fds, opened)  # type: ignore[attr-defined]
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)


class EnvSpawnProcess(SpawnProcess):
    """A spawned process whose environment is `environ`, not the parent's."""

    def __init__(self, *args: Any, environ: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._environ = dict(environ)

    def _Popen(self, process_obj: Any) -> _EnvPopen:  # type: ignore[override]
        return _EnvPopen(process_obj, self._environ)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_environ", None)  # the child has it as its environment already
        return state


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerLimits:
    """Resource limits a CPU worker sets on itself once started; 0 leaves a limit off."""

    address_space_headroom_bytes: int = 0
    """Address space beyond the worker's size once started (`RLIMIT_AS`)."""
    open_files: int = 0
    """Open file descriptors (`RLIMIT_NOFILE`)."""
    task_cpu_s: float = 0.0
    """CPU seconds one call may use (`RLIMIT_CPU`, moved before each call)."""
    inspectable: bool = False
    """Leave `PR_SET_DUMPABLE` on (`server.inspectable`), else `forbid_inspection`."""

    def seal(self) -> None:
        """First thing in the worker: its memory and environment unreadable to its uid."""
        if not self.inspectable:
            forbid_inspection()

    def apply(self) -> None:
        """Set the limits on this process (in the worker, after its initializer): hard ones,
        but the CPU time's, which moves before each call."""
        _lower(resource.RLIMIT_CORE, 0, hard=True)
        if self.open_files:
            _lower(resource.RLIMIT_NOFILE, self.open_files, hard=True)
        if self.address_space_headroom_bytes:
            _lower(
                resource.RLIMIT_AS,
                address_space_bytes() + self.address_space_headroom_bytes,
                hard=True,
            )
        self.arm_task()

    def arm_task(self) -> None:
        """Allow the next call `task_cpu_s` CPU seconds beyond what this process has used."""
        if not self.task_cpu_s:
            return
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used_s = usage.ru_utime + usage.ru_stime
        _lower(resource.RLIMIT_CPU, int(used_s + self.task_cpu_s) + 1, may_raise=True)


def address_space_bytes() -> int:
    """This process's virtual size (`VmSize`), from /proc; 0 where it cannot be read."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _lower(kind: int, soft: int, *, may_raise: bool = False, hard: bool = False) -> None:
    """Set a soft limit within the hard one; with `may_raise`, above the current soft one too;
    with `hard`, the hard limit to it as well (this process can then never raise it)."""
    current, ceiling = resource.getrlimit(kind)
    if ceiling != resource.RLIM_INFINITY:
        soft = min(soft, ceiling)
    if not may_raise and current != resource.RLIM_INFINITY:
        soft = min(soft, current)
    try:
        resource.setrlimit(kind, (soft, soft if hard else ceiling))
    except (ValueError, OSError) as err:
        logger.warning("cannot set resource limit %d to %d: %s", kind, soft, err)
