"""What both job stores keep on disk: job directories under `root/jobs`, uploads in `<id>/files`."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from serving.jobs.files import Document
from serving.jobs.store.durable import fsync_path

logger = logging.getLogger(__name__)

ORPHAN_MIN_AGE_S = 3600.0
"""A job directory without a row is swept while the store is open only once it is this old: an
upload is staged in its directory before the row is committed (`server.upload_timeout_s` is 600 s
by default)."""


def modified_at(path: Path) -> float:
    """When `path` last changed (wall clock); infinitely recent when it is gone (another process
    removed it)."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


class JobDirs:
    """Job directories under `root / "jobs"`, named by job id; a store's base class."""

    def __init__(self, root: Path) -> None:
        self.jobs_root = root / "jobs"

    def job_dir(self, job_id: str) -> Path:
        """Where a job's files live (its uploads in `job_dir / "files"`)."""
        return self.jobs_root / job_id

    def outputs_bytes(self, job_ids: Iterable[str]) -> int:
        """Bytes of the outputs rendered for these jobs' documents (`outputs/` of each job:
        searchable PDFs, hOCR, ALTO, text), which count against their owner's stored bytes."""
        total = 0
        for job_id in job_ids:
            with contextlib.suppress(FileNotFoundError):
                for entry in os.scandir(self.job_dir(job_id) / "outputs"):
                    with contextlib.suppress(FileNotFoundError):
                        if entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
        return total

    def discard(self, job_id: str) -> None:
        """Remove the directory of a job that was never created (its upload was refused)."""
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)

    def sync_uploads(self, job_id: str, documents: Sequence[Document]) -> None:
        """Bring a job's staged documents, and the directories naming them, to the disk (before
        the rows that point at them are committed)."""
        job_dir = self.job_dir(job_id)
        for document in documents:
            fsync_path(document.path)
        for directory in (job_dir / "files", job_dir, job_dir.parent):
            fsync_path(directory)

    def remove_orphans(self, paths: Iterable[Path], known: set[str]) -> None:
        """Remove the job directories among `paths` that no job in `known` names (uploads a
        crash cut short)."""
        for path in paths:
            if path.name not in known:
                logger.info("removing job directory %s with no job", path.name)
                shutil.rmtree(path, ignore_errors=True)

    def remove_stale_orphans(
        self, older_than: float, known: Callable[[list[str]], set[str]]
    ) -> None:
        """Remove the job directories last changed before `older_than` that no job names (a
        submit that failed, its row never committed); `known(names)` says which of `names` are
        jobs. The directories are listed before it is asked, so a job committed meanwhile is
        known."""
        if not self.jobs_root.is_dir():
            return
        old = [path for path in self.jobs_root.iterdir() if modified_at(path) < older_than]
        if old:
            self.remove_orphans(old, known([path.name for path in old]))
