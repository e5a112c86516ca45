"""What one submit of a job may take before its upload is read: its key's room in the job store
(`auth.max_jobs`, `max_stored_bytes`, `max_stored_pages`, or its `[[keys]]` entry's) and free
disk (`jobs.min_free_disk_bytes`) where the upload is spooled and then kept.

Both are asked before the body is read, so a refused client has not uploaded for nothing; the
store checks the key's limits again, with its other submits serialised, as it records the job.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from starlette.requests import Request

from serving.config import AppConfig
from serving.errors import InsufficientStorage
from serving.http.auth import identity_of
from serving.jobs.store import JobStore
from serving.jobs.store.types import StoredLimits, StoredUsage

_MIB = 1 << 20


def stored_limits(request: Request, config: AppConfig) -> StoredLimits:
    """The request's key's limits in the job store; with keys off, `[auth]`'s defaults (every
    job submitted without a key counted together)."""
    identity = identity_of(request)
    if identity is None:
        auth = config.auth
        return StoredLimits(
            max_jobs=auth.max_jobs, max_bytes=auth.max_stored_bytes, max_pages=auth.max_stored_pages
        )
    quota = identity.quota
    return StoredLimits(
        max_jobs=quota.max_jobs, max_bytes=quota.max_stored_bytes, max_pages=quota.max_stored_pages
    )


def check_room(store: JobStore, owner: str | None, limits: StoredLimits) -> None:
    """Refuse a submit when its key already holds its most jobs, bytes or pages (a job of one
    page and no byte would not fit).

    Raises:
        StoredQuotaExceeded: it does (429).
    """
    limits.check(owner, store.usage(owner), StoredUsage(1, 0, 0))


def upload_bytes(request: Request, max_upload_bytes: int) -> int:
    """What an upload may write to disk: its declared `Content-Length`, else (chunked) the most a
    job may upload."""
    declared = request.headers.get("content-length", "")
    return min(int(declared), max_upload_bytes) if declared.isdigit() else max_upload_bytes


def check_free_disk(
    data_dir: Path, need_bytes: int, min_free_bytes: int, *, spool: bool = True
) -> None:
    """Refuse an upload of `need_bytes` unless the disks of `data_dir` (where a job's files are
    kept) and of the temporary directory (where multipart files are spooled first; not with
    `spool` off: a rendered output) each keep `min_free_bytes` free after it; 0 checks nothing.

    Raises:
        InsufficientStorage: one of them would not (507; nothing was read or written).
    """
    if min_free_bytes <= 0:
        return
    places = [("jobs.data_dir", data_dir)]
    if spool:
        places.append(("the upload spool", Path(tempfile.gettempdir())))
    what = "upload" if spool else "output"
    for where, path in places:
        free = _free_bytes(path)
        if free is not None and free - need_bytes < min_free_bytes:
            raise InsufficientStorage(
                f"Not enough free disk for this {what}: {where} has {free // _MIB} MiB free, the "
                f"{what} may take {need_bytes // _MIB} MiB and {min_free_bytes // _MIB} MiB must "
                "stay free (jobs.min_free_disk_bytes); retry later or send less"
            )


def _free_bytes(path: Path) -> int | None:
    """Free bytes for this process on `path`'s disk (its nearest existing folder); None when
    it cannot be read."""
    for folder in (path, *path.parents):
        try:
            stat = os.statvfs(folder)
        except OSError:
            continue
        return stat.f_bavail * stat.f_frsize
    return None
