"""Arrays moved between processes through POSIX shared memory instead of pickled bytes.

A producer copies an array into a new segment and passes the small `ShmRef` on; the consumer copies
it out and unlinks the segment. Segment names carry the server's prefix, so `sweep` removes any
segment a killed process left behind: none outlives the server. A server that was itself killed
leaves its segments to the next one, whose `sweep_orphans` removes those no live server owns.

A prefix is `ocrsrv<pid>x<token>_`, with a random token for each start, and the server owns it by
holding an flock on `ocrsrv.<pid>x<token>.lock` beside the segments (`claim_prefix`). The pid alone
does not tell: in a container the server is PID 1 at every start, and a pod's memory-backed
/dev/shm outlives the container, so a server killed with -9 (or by the OOM killer) left segments
under the very pid of the next one (issue 26). The kernel drops the lock when its holder dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import logging
import os
import re
import secrets
import uuid
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

logger = logging.getLogger(__name__)

_SHM_DIR = "/dev/shm"
_SERVER_SEGMENT = re.compile(r"ocrsrv(\d+)(?:x([0-9a-f]{8}))?_")
"""A server's segment: pid, and the start's token (none in names of servers before issue 26)."""
_SERVER_LOCK = re.compile(r"ocrsrv\.(\d+)x([0-9a-f]{8})\.lock")


@dataclass(frozen=True, slots=True)
class ShmRef:
    """Where an array lives: segment name, shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    sizes: tuple[tuple[int, int], ...] = ()
    """Model inputs (uint8 pixels): per row, the (height, width) that holds pixels, the rest
    padding (`pipelines.pixels.Pixels.sizes`); empty: all pixels, or not a model input."""

    @property
    def nbytes(self) -> int:
        """Size of the array in bytes."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def server_prefix(pid: int | None = None) -> str:
    """How the segment names of every server whose main process is `pid` begin, whatever the
    token of its start (`claim_prefix`): `ocrsrv<pid>x`, to find a server's segments by its pid."""
    return f"ocrsrv{pid if pid is not None else os.getpid()}x"


@dataclass(frozen=True, slots=True)
class PrefixClaim:
    """A segment-name prefix this process owns while it holds the lock on `lock_path`."""

    prefix: str
    lock_path: str | None
    """None where there is no shared-memory directory to keep a lock in (not Linux)."""
    fd: int | None

    def release(self) -> None:
        """Give the prefix up (after sweeping its segments); the next sweep may remove any
        segment still named with it."""
        if self.lock_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.lock_path)
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)


def claim_prefix(shm_dir: str = _SHM_DIR) -> PrefixClaim:
    """A fresh prefix, `ocrsrv<pid>x<token>_`, owned by this process until it releases it or dies.

    The lock file is locked under a temporary name and then renamed, so a sweep never finds it
    unlocked while its server lives.
    """
    token = secrets.token_hex(4)
    prefix = f"{server_prefix()}{token}_"
    if not os.path.isdir(shm_dir):
        return PrefixClaim(prefix=prefix, lock_path=None, fd=None)
    lock_path = os.path.join(shm_dir, _lock_name(os.getpid(), token))
    temporary = f"{lock_path}.new"
    fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(temporary, lock_path)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return PrefixClaim(prefix=prefix, lock_path=lock_path, fd=fd)


def _lock_name(pid: int, token: str) -> str:
    return f"ocrsrv.{pid}x{token}.lock"


def put(array: np.ndarray, prefix: str, sizes: tuple[tuple[int, int], ...] = ()) -> ShmRef:
    """Copy `array` into a new segment named with `prefix` (`sizes`: `ShmRef.sizes`)."""
    name = f"{prefix}{uuid.uuid4().hex[:16]}"
    size = max(int(array.nbytes), 1)
    segment = shared_memory.SharedMemory(name=name, create=True, size=size)
    try:
        view: np.ndarray = np.ndarray(array.shape, dtype=array.dtype, buffer=segment.buf)
        view[...] = array
        del view
    finally:
        segment.close()
    shape = tuple(int(d) for d in array.shape)
    return ShmRef(name=name, shape=shape, dtype=array.dtype.str, sizes=sizes)


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


def put_parts(arrays: list[np.ndarray], prefix: str) -> ShmRef:
    """Copy `arrays` one after another, flattened, into one new segment (of their dtype, which
    they share): one copy each, no concatenated array first. `ShmRef.shape` is the total size."""
    dtype = arrays[0].dtype if arrays else np.dtype(np.uint8)
    total = sum(int(a.size) for a in arrays)
    name = f"{prefix}{uuid.uuid4().hex[:16]}"
    segment = shared_memory.SharedMemory(
        name=name, create=True, size=max(total * dtype.itemsize, 1)
    )
    try:
        flat: np.ndarray = np.ndarray((total,), dtype=dtype, buffer=segment.buf)
        start = 0
        for array in arrays:
            flat[start : start + array.size].reshape(array.shape)[...] = array
            start += array.size
        del flat
    finally:
        segment.close()
    return ShmRef(name=name, shape=(total,), dtype=dtype.str)


def view(ref: ShmRef) -> np.ndarray:
    """The array read in place, without a copy: a read-only mapping of its segment that lasts as
    long as the array or any view of it (the segment stays until unlinked as usual). Where there
    is no shared-memory directory to map (not Linux), a copy (`take`, not unlinking)."""
    path = os.path.join(_SHM_DIR, ref.name)
    if not os.path.isdir(_SHM_DIR) or 0 in ref.shape:
        return take(ref, unlink=False)
    return np.memmap(path, dtype=np.dtype(ref.dtype), mode="r", shape=ref.shape)


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
    """Remove the segments no live server owns (their server was killed, so it could not sweep
    them), and the lock files of dead servers; returns how many segments and bytes were removed.

    A segment named with a token is owned while some process holds its prefix's lock
    (`claim_prefix`), whatever its pid: the same pid with another token is a dead server's. A
    segment named without a token (a server from before tokens) is owned while its pid is alive
    and is not this process's.
    """
    removed = size = 0
    dead: set[str] = set()
    others = 0
    owned: dict[tuple[int, str | None], bool] = {}
    for name in sorted(os.listdir(shm_dir)) if os.path.isdir(shm_dir) else []:
        segment, lock = _SERVER_SEGMENT.match(name), _SERVER_LOCK.fullmatch(name)
        match = segment or lock
        if match is None:
            continue
        owner = (int(match.group(1)), match.group(2))
        if owner not in owned:
            owned[owner] = _owned(*owner, shm_dir)
        if owned[owner]:
            continue
        path = os.path.join(shm_dir, name)
        try:
            nbytes = os.stat(path).st_size
            os.unlink(path)
        except FileNotFoundError:
            continue  # its own server's last worker or another sweep removed it meanwhile
        except PermissionError:
            # Another user's, in the sticky /dev/shm: theirs to sweep. Before 2026-12-07 this
            # escaped the start of a non-root server (the image's uid) beside root's leftovers,
            # and the server answered 503 to every /readyz, saying nothing.
            others += 1
            continue
        if segment is not None:
            removed += 1
            size += nbytes
            dead.add(f"{owner[0]}x{owner[1]}" if owner[1] else str(owner[0]))
    if removed:
        logger.info(
            "removed %d shared-memory segments (%d bytes) left by dead servers (%s)",
            removed,
            size,
            ", ".join(sorted(dead)),
        )
    if others:
        logger.info("left %d files of dead servers of other users in %s", others, shm_dir)
    return removed, size


def _owned(pid: int, token: str | None, shm_dir: str) -> bool:
    """Whether a live server owns the prefix of `pid` and `token` (see `sweep_orphans`)."""
    if token is None:
        return pid != os.getpid() and _alive(pid)
    try:
        fd = os.open(os.path.join(shm_dir, _lock_name(pid, token)), os.O_RDWR)
    except FileNotFoundError:
        return False
    except PermissionError:
        return True  # another user's server: not ours to judge
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the lock if this sweep took it
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process; no pid at all
    return True
