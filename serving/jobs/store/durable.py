"""Durable file writes for the job stores: files whole or not at all, directory entries synced."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all, durably: its bytes, then its name (the rename)."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_path(path.parent)  # the rename is an entry of the directory: durable once it is synced


def fsync_path(path: Path) -> None:
    """Flush a file's bytes, or a directory's entries (new, renamed, removed), to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
