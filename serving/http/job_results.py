"""`GET /v1/jobs/{id}/results` as it streams: finished pages as NDJSON lines (completion order)
or text (document order), following the job until it ends, for `jobs.follow_max_s` at most.

A follow stream had no lifetime (issue 49, item 4): it now ends after `jobs.follow_max_s`, and
`?after=N` (the lines, or text pages, it gave) goes on from there, no page twice. It is woken
by its job's events, never polling the store (`serving.jobs.follow`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from serving.errors import OcrError, ValidationFailed
from serving.jobs.runner import JobRunner
from serving.jobs.store.types import FinishedPage, JobNotFound

FOLLOW_CHECK_S = 30.0
"""A following stream rereads the job at least this often (a safety net; pages wake it, and on
a store shared by replicas `serving.jobs.follow` wakes it for pages other replicas finish)."""


def results_stream(
    runner: JobRunner, job_id: str, *, follow: bool, fmt: str, after: str, follow_max_s: float
) -> tuple[AsyncIterator[bytes], str]:
    """The job's results in `fmt` ("ndjson" or "text") after the first `after` pages, and their
    media type.

    Raises:
        ValidationFailed: `fmt` or `after` is not one (422).
    """
    if fmt not in ("text", "ndjson"):
        raise ValidationFailed("format must be ndjson or text")
    skip = _after(after)
    until = asyncio.get_running_loop().time() + follow_max_s
    if fmt == "text":
        return _text(runner, job_id, follow, _Cursor(from_seq=skip), until), (
            "text/plain; charset=utf-8"
        )
    return _ndjson(runner, job_id, follow, _Cursor(after_order=skip), until), "application/x-ndjson"


def _after(text: str) -> int:
    """`?after=N`: pages a stream already gave (lines, or form feeds)."""
    if not text.isdigit() or len(text) > 9:
        raise ValidationFailed("after must be the number of pages already received (0 or more)")
    return int(text)


@dataclass(slots=True)
class _Cursor:
    """How far a results stream got: in completion order (NDJSON) or document order (text)."""

    after_order: int = 0
    from_seq: int | None = None


async def _ndjson(
    runner: JobRunner, job_id: str, follow: bool, cursor: _Cursor, until: float
) -> AsyncIterator[bytes]:
    async for pages in _follow(runner, job_id, follow, cursor, until):
        for page in pages:
            line = await _line(runner, job_id, page)
            if line is None:
                return  # deleted meanwhile
            yield line + b"\n"
            cursor.after_order = page.order


async def _text(
    runner: JobRunner, job_id: str, follow: bool, cursor: _Cursor, until: float
) -> AsyncIterator[bytes]:
    async for pages in _follow(runner, job_id, follow, cursor, until):
        for page in pages:
            text = ""
            if page.error is None:
                line = await _line(runner, job_id, page)
                if line is None:
                    return
                text = "".join(f"{row['text']}\n" for row in json.loads(line)["lines"])
            yield (text + "\f").encode()
            cursor.from_seq = page.seq + 1


async def _follow(
    runner: JobRunner, job_id: str, follow: bool, cursor: _Cursor, until: float
) -> AsyncIterator[list[FinishedPage]]:
    """Finished pages as they come, until the job ends (or now, without `follow`), is deleted, or
    the loop's clock passes `until` (`jobs.follow_max_s`: the client resumes with `?after=`).
    Woken by the job's events, never polling the store: on a store replicas share, one task
    looks for every followed job's changes (`serving.jobs.follow`)."""
    loop = asyncio.get_running_loop()
    while True:
        left_s = until - loop.time()
        if follow and left_s <= 0:
            return
        changed = runner.events.watch(job_id)
        try:
            info, pages = await asyncio.to_thread(
                runner.store.finished_pages,
                job_id,
                after_order=cursor.after_order,
                from_seq=cursor.from_seq,
            )
        except OcrError:
            return  # deleted, or the server is stopping
        if pages:
            yield pages
            continue
        if info.finished or not follow:
            return
        with contextlib.suppress(TimeoutError):
            # Not wait_for: on Python 3.11 it can swallow a cancel that meets the event's set (a
            # test's outbox.stop() waited on a loop that went on).
            async with asyncio.timeout(min(FOLLOW_CHECK_S, left_s)):
                await changed.wait()


async def _line(runner: JobRunner, job_id: str, page: FinishedPage) -> bytes | None:
    """The page's NDJSON line: its result, or its error; None when the job was deleted."""
    if page.error is not None:
        return json.dumps(page.error.to_json(), ensure_ascii=False).encode()
    try:
        return await asyncio.to_thread(runner.store.read_result, job_id, page.seq)
    except JobNotFound:
        return None
