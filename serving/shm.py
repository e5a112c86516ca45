"""Arrays moved between processes through POSIX shared memory instead of pickled bytes.

A producer copies an array into a new segment and passes the small `ShmRef` on; the consumer copies
it out and unlinks the segment. Segment names carry the server's prefix, so `sweep` removes any
segment a killed process left behind: none outlives the server.
"""

from __future__ import annotations

import glob
import os
import uuid
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

_SHM_DIR = "/dev/shm"


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
