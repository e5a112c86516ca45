"""Rows of either job store (SQLite's or PostgreSQL's, whose columns are the same): the rows a new
job writes, and the API's values read back from them."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

from serving.decode.readers import FileKind
from serving.jobs.files import Document
from serving.jobs.hooks import JobHooks
from serving.jobs.store.types import FileInfo, FinishedPage, JobInfo, PageError, PageTask

FileRow = tuple[str, int, str, str, str, int, int]
"""`files` columns: job_id, idx, name, stored_as, kind, pages, size_bytes."""
PageRow = tuple[str, int, int, int]
"""`pages` columns: job_id, seq, file_idx, page."""


class Row(Protocol):
    """A row read by column name: `sqlite3.Row`, or psycopg's `dict_row`."""

    def __getitem__(self, key: str, /) -> Any: ...


def file_rows(job_id: str, documents: Sequence[Document]) -> list[FileRow]:
    """A new job's `files` rows, one a document in upload order."""
    return [
        (job_id, i, d.name, d.path.name, d.kind, d.pages, d.size_bytes)
        for i, d in enumerate(documents)
    ]


def page_rows(job_id: str, documents: Sequence[Document]) -> list[PageRow]:
    """A new job's `pages` rows: every page of every document, numbered in document order."""
    pages = ((i, page) for i, d in enumerate(documents) for page in range(d.pages))
    return [(job_id, seq, i, page) for seq, (i, page) in enumerate(pages)]


def job_info(
    row: Row, *, files: tuple[FileInfo, ...] = (), failed: tuple[PageError, ...] = ()
) -> JobInfo:
    """A `jobs` row, with the job's files and failed pages when given."""
    return JobInfo(
        id=row["id"],
        status=row["status"],
        options=json.loads(row["options"]),
        pages_total=row["pages_total"],
        pages_done=row["pages_done"],
        pages_failed=row["pages_failed"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        files=files,
        failed=failed,
        owner=row["owner"],
        hooks=JobHooks.from_json(json.loads(row["hooks"]) if row["hooks"] else None),
    )


def job_detail(row: Row, files: Iterable[Row], failed: Iterable[Row]) -> JobInfo:
    """A `jobs` row with its `files` rows (in index order) and its failed `pages` rows."""
    infos = tuple(file_info(f) for f in files)
    errors = tuple(page_error(p, infos[p["file_idx"]].name) for p in failed)
    return job_info(row, files=infos, failed=errors)


def finished_page(row: Row) -> FinishedPage:
    """A finished `pages` row joined with its file's name."""
    error = page_error(row, row["name"]) if row["status"] == "failed" else None
    return FinishedPage(
        seq=row["seq"],
        order=row["finished_order"],
        file_index=row["file_idx"],
        page=row["page"],
        error=error,
    )


def finished_run(rows: Iterable[Row]) -> list[FinishedPage]:
    """`pages` rows (joined with their file's name) in document order, up to the first page
    not finished yet."""
    done = itertools.takewhile(lambda row: row["status"] in ("done", "failed"), rows)
    return [finished_page(row) for row in done]


def file_info(row: Row) -> FileInfo:
    """A `files` row."""
    return FileInfo(
        index=row["idx"],
        name=row["name"],
        kind=cast(FileKind, row["kind"]),
        pages=row["pages"],
        size_bytes=row["size_bytes"],
        stored_as=row["stored_as"],
    )


def page_error(row: Row, file: str) -> PageError:
    """A failed `pages` row."""
    return PageError(
        file_index=row["file_idx"],
        file=file,
        page=row["page"],
        code=row["error_code"] or "internal",
        message=row["error_message"] or "",
    )


def page_task(
    page: Row, file: Row, *, options: str, attempts: int, job_dir: Callable[[str], Path]
) -> PageTask:
    """A claimed `pages` row (with `job_id`), its `files` row, and its job's options (JSON)."""
    job_id: str = page["job_id"]
    return PageTask(
        job_id=job_id,
        seq=page["seq"],
        file_index=page["file_idx"],
        file_name=file["name"],
        page=page["page"],
        kind=cast(FileKind, file["kind"]),
        path=job_dir(job_id) / "files" / file["stored_as"],
        options=json.loads(options),
        attempts=attempts,
    )
