"""A job's files: uploads staged into the job's folder (zips unpacked, limits checked on the way).

The server never parses a document itself: each stored file's pages are counted (and an animated
image decoded once into a multi-page TIFF) by `serving.decode.documents.stage_document` in a CPU
worker process (`serving.jobs.staging.WorkerCounter`), so a pdfium crash or a slow xref rebuild
costs a worker, not the server (issue 26).
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from serving.decode.readers import FileKind, sniff_kind
from serving.errors import (
    InvalidInput,
    OcrError,
    PayloadTooLarge,
    ValidationFailed,
)
from serving.jobs.zip_entries import count_entries

PageCounter = Callable[[Path, FileKind], int]
"""Readies a stored document and returns its page count (`serving.decode.documents.stage_document`);
called on the staging thread.

Raises:
    OcrError: the file is not a readable document or breaks a limit (4xx), or the worker reading
        it died (503).
"""

_COPY_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Document:
    """One document of a job, stored in its folder."""

    name: str
    """As the user knows it: the upload's file name, or `archive.zip/inner.pdf`."""
    path: Path
    kind: FileKind
    pages: int
    size_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchLimits:
    """What one job may hold."""

    max_files: int
    max_pages: int
    max_bytes: int
    max_zip_entries: int
    """Entries in the job's zips, all together: folders and skipped metadata count too."""


class _Stager:
    """Copies uploads into a job's `files` directory, unpacking zips and enforcing limits."""

    def __init__(self, dest: Path, limits: BatchLimits, count: PageCounter) -> None:
        self.dest = dest
        self.limits = limits
        self.count = count
        self.documents: list[Document] = []
        self.bytes = 0
        self.pages = 0
        self.zip_entries = 0
        self._stored = 0

    def add_stream(self, name: str, stream: IO[bytes]) -> None:
        path = self._next_path()
        with path.open("wb") as out:
            self._copy(stream, out, name)
        if zipfile.is_zipfile(path):
            self._unpack(name, path)
            path.unlink()
        else:
            self._add(name, path)

    def _unpack(self, name: str, path: Path) -> None:
        self._count_entries(name, path)
        try:
            archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile as err:
            raise InvalidInput(f"{name}: not a readable zip ({err})") from err
        with archive:
            for entry in archive.infolist():
                # Windows tools write `dir\\name`, which zipfile keeps on Linux: one separator,
                # so that folders, dot-files and __MACOSX\\ are told as the others are.
                member = entry.filename.replace("\\", "/")
                base = member.rsplit("/", 1)[-1]
                if not base or member.startswith("__MACOSX/") or base.startswith("."):
                    continue
                self._check_count(len(self.documents) + 1)
                target = self._next_path()
                inner = f"{name}/{member.lstrip('/')}"
                try:
                    with archive.open(entry) as src, target.open("wb") as out:
                        self._copy(src, out, inner, unpacked=True)
                except (zipfile.BadZipFile, RuntimeError, NotImplementedError) as err:
                    raise InvalidInput(f"{inner}: cannot unpack ({err})") from err
                if zipfile.is_zipfile(target):
                    raise ValidationFailed(f"{inner}: zips inside zips are not supported")
                self._add(inner, target)

    def _count_entries(self, name: str, path: Path) -> None:
        """Count every entry, skipped ones too, from the central directory before `ZipFile`
        builds an object for each of them."""
        limit = self.limits.max_zip_entries
        with path.open("rb") as f:
            self.zip_entries += count_entries(f, at_most=limit - self.zip_entries)
        if self.zip_entries > limit:
            raise ValidationFailed(
                f"More than {limit} entries in the zips of one job, at {name}; folders and "
                "skipped entries such as __MACOSX/ and dotfiles count too (jobs.max_zip_entries)"
            )

    def _copy(self, src: IO[bytes], out: IO[bytes], name: str, *, unpacked: bool = False) -> None:
        while chunk := src.read(_COPY_CHUNK):
            self.bytes += len(chunk)
            if self.bytes > self.limits.max_bytes:
                what = "unpacked from its zips" if unpacked else "uploaded"
                raise PayloadTooLarge(
                    f"More than {self.limits.max_bytes} bytes {what} for one job at {name} "
                    "(jobs.max_upload_bytes)"
                )
            out.write(chunk)

    def _add(self, name: str, path: Path) -> None:
        self._check_count(len(self.documents) + 1)
        with path.open("rb") as f:
            head = f.read(1024)
        if not head:
            raise InvalidInput(f"{name}: empty file")
        kind = sniff_kind(head)
        if kind is None:
            raise ValidationFailed(f"{name}: neither a PDF, a supported image, nor a zip of them")
        try:
            pages = self.count(path, kind)
        except OcrError as err:
            raise type(err)(f"{name}: {err.message}") from err
        self.pages += pages
        if self.pages > self.limits.max_pages:
            raise ValidationFailed(
                f"More than {self.limits.max_pages} pages in one job, counting {name} "
                "(jobs.max_pages_per_job)"
            )
        self.documents.append(
            Document(name=name, path=path, kind=kind, pages=pages, size_bytes=path.stat().st_size)
        )

    def _check_count(self, count: int) -> None:
        if count > self.limits.max_files:
            raise ValidationFailed(
                f"More than {self.limits.max_files} files in one job (jobs.max_files_per_job)"
            )

    def _next_path(self) -> Path:
        self._stored += 1
        return self.dest / str(self._stored)


def stage_uploads(
    uploads: Sequence[tuple[str, IO[bytes]]], dest: Path, limits: BatchLimits, count: PageCounter
) -> list[Document]:
    """Copy uploads (name, stream) into `dest`, unpacking zips, checking every limit on the way;
    `count` reads each stored document (`serving.jobs.staging.WorkerCounter`).

    Raises:
        PayloadTooLarge: more bytes than `max_bytes`, uploaded or unpacked.
        ValidationFailed: too many files or pages, no file, or a file that is not a document.
        InvalidInput: an unreadable document or zip, or one over a decode limit.
        WorkerUnavailable: the CPU worker reading a document died (as many times as the pool
            retries).
        DeadlineExceeded: a document was not read within the counter's time.
        ClientGone: the counter was cancelled (the client went away).
    """
    if not uploads:
        raise ValidationFailed("Send one or more files in multipart fields named `file`")
    dest.mkdir(parents=True, exist_ok=True)
    stager = _Stager(dest, limits, count)
    for name, stream in uploads:
        stager.add_stream(name, stream)
    return stager.documents
