"""The precision check's verdicts, cached on disk: one JSON file per model pair and what its
measurement depends on, and a lock so that workers starting together measure once.

A verdict holds for one CPU model (OpenVINO's `FULL_DEVICE_NAME` and capabilities), one
OpenVINO version, the pair's model files (their bytes' SHA-256), the check set (its manifest's
digest), the bounds and how the check is run (`CHECK_PROCEDURE`); the file's name hashes them
all, so a change of any measures again and nothing is ever invalidated by hand. The lock is an
advisory `flock` on `<dir>/.lock`: the first worker to take it measures while the others wait
on it, then read its file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CHECK_PROCEDURE = 1
"""Bumped whenever the measurement changes (what is read at which precision, in which order):
verdicts of an older procedure are measured again."""
LOCK_FILE = ".lock"


def cache_key(fields: Mapping[str, Any]) -> str:
    """The cache file's name for a measurement that depends on `fields` (JSON values)."""
    text = json.dumps({"procedure": CHECK_PROCEDURE, **fields}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the cache's lock (blocking until the worker holding it lets go); creates the
    directory.

    Raises:
        OSError: the directory cannot be created or the lock file opened.
    """
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / LOCK_FILE).open("a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def read(directory: Path, key: str) -> dict[str, Any] | None:
    """The verdict cached under `key`; None where there is none, or it cannot be read (it is
    then measured again, and the file replaced)."""
    path = directory / f"{key}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        logger.warning("precision check cache %s unreadable, measuring again: %s", path, err)
        return None
    return data if isinstance(data, dict) else None


def write(directory: Path, key: str, data: Mapping[str, Any]) -> Path:
    """Cache `data` under `key`: written beside, then renamed into place.

    Raises:
        OSError: the directory cannot be written.
    """
    path = directory / f"{key}.json"
    fd, staging = tempfile.mkstemp(prefix=f".{key}-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=1)
            f.write("\n")
        os.replace(staging, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
    return path
