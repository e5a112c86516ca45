"""Arrays moved between processes through POSIX shared memory instead of pickled bytes.

A producer copies an array into a new segment and passes the small `ShmRef` on; the consumer copies
it out and unlinks the segment. Segment names carry the server's prefix, so `sweep` removes any
segment a killed process left behind: none outlives the server. A server that was itself killed
leaves its segments to the next one, whose `sweep_orphans` removes those of servers no longer alive.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import uuid
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

logger = logging.getLogger(__name__)

_SHM_DIR = "/dev/shm"
_SERVER_SEGMENT = re.compile(r"ocrsrv(\d+)_")


@dataclass(frozen=True, slots=True)
class ShmRef:
    """Where an array lives: segment name, shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        """Size of the array in bytes."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def server_prefix(pid: int | None = None) -> str:
    """The segment-name prefix of the server whose main process is `pid`."""
    return f"ocrsrv{pid if pid is not None else os.getpid()}_"


def put(array: np.ndarray, prefix: str) -> ShmRef:
    """Copy `array` into a new segment named with `prefix`."""
    name = f"{prefix}{uuid.uuid4().hex[:16]}"
    size = max(int(array.nbytes), 1)
    segment = shared_memory.SharedMemory(name=name, create=True, size=size)
    try:
        view: np.ndarray = np.ndarray(array.shape, dtype=array.dtype, buffer=segment.buf)
        view[...] = array
        del view
    finally:
        segment.close()
    return ShmRef(name=name, shape=tuple(int(d) for d in array.shape), dtype=array.dtype.str)


def take(ref: ShmRef, *, unlink: bool = True) -> np.ndarray:
    """Copy the array out of its segment, unlinking the segment unless told not to."""
    segment = shared_memory.SharedMemory(name=ref.name)
    try:
        view: np.ndarray = np.ndarray(ref.shape, dtype=np.dtype(ref.dtype), buffer=segment.buf)
        array = view.copy()
        del view
    finally:
        segment.close()
        if unlink:
            segment.unlink()
    return array


def take_into(refs: list[ShmRef], out: np.ndarray, *, unlink: bool = True) -> None:
    """Copy each segment's array into consecutive rows of `out` (batch collation)."""
    row = 0
    for ref in refs:
        segment = shared_memory.SharedMemory(name=ref.name)
        try:
            view: np.ndarray = np.ndarray(ref.shape, dtype=np.dtype(ref.dtype), buffer=segment.buf)
            out[row : row + ref.shape[0]] = view
            row += ref.shape[0]
            del view
        finally:
            segment.close()
            if unlink:
                segment.unlink()


def discard(ref: ShmRef) -> None:
    """Unlink a segment that will not be read (cancelled or failed work); missing is fine."""
    try:
        segment = shared_memory.SharedMemory(name=ref.name)
    except FileNotFoundError:
        return
    segment.close()
    segment.unlink()


def sweep(prefix: str) -> int:
    """Unlink every segment whose name starts with `prefix`; returns how many there were."""
    count = 0
    for path in glob.glob(os.path.join(_SHM_DIR, f"{glob.escape(prefix)}*")):
        discard(ShmRef(name=os.path.basename(path), shape=(0,), dtype="u1"))
        count += 1
    return count


def sweep_orphans(shm_dir: str = _SHM_DIR) -> tuple[int, int]:
    """Remove the segments of servers that are no longer alive (killed, so they could not sweep
    their own); returns how many segments and bytes were removed.

    A server is known by the pid in its prefix (`server_prefix`); a pid alive now, even if reused
    by another process, keeps its segments.
    """
    removed = size = 0
    dead: set[int] = set()
    for name in sorted(os.listdir(shm_dir)) if os.path.isdir(shm_dir) else []:
        match = _SERVER_SEGMENT.match(name)
        if match is None or _alive(int(match.group(1))):
            continue
        path = os.path.join(shm_dir, name)
        try:
            nbytes = os.stat(path).st_size
            os.unlink(path)
        except FileNotFoundError:
            continue  # its own server's last worker or another sweep removed it meanwhile
        removed += 1
        size += nbytes
        dead.add(int(match.group(1)))
    if removed:
        logger.info(
            "removed %d shared-memory segments (%d bytes) left by dead servers (pids %s)",
            removed,
            size,
            ", ".join(str(pid) for pid in sorted(dead)),
        )
    return removed, size


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process; no pid at all
    return True
