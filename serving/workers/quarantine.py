"""Poison pills: pages that killed a CPU worker twice are quarantined by their content's hash.

A page whose bytes crash a decoder (or exhaust a worker's memory) kills every worker that reads
it. Before (issue 37, item 6), the pool ran it again on another worker up to 3 times and a job's
runner tried it 4 times, 12 deaths for one page, for every such page of every job; the same bytes
sent again started over. Now the work of one page carries its key (`reading`: the document's
SHA-256 and the page's index) to the CPU pool, which counts the workers that died running it: at
`DEATHS` the page fails alone with `PageQuarantined` (422), the others of its job and request go
on, and the same page in any later request or job is refused at once, without a worker.

The quarantine is this process's memory (bounded, oldest forgotten first): a restart forgets it,
and the job store's claim cap (`serving.jobs.store.types.MAX_CLAIMS`) covers pages that kill the
whole process.

Counting per page left a document of crashing pages expensive: a 1000-page job whose pages all
crash cost two worker deaths a page, and a page that hung its worker until the request's
deadline (the worker then killed) was not counted at all (issue 49, item 7). Now deaths are also
counted per document (`document_deaths`, `workers.quarantine_document_deaths`): past them every
page of it is refused; and the CPU pool counts a worker it kills because a call outlived its
caller's deadline as a death of that call's page (`CpuPool.run(deadline=...)`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Iterator
from typing import NamedTuple, TypeVar

from serving.errors import OcrError

DEATHS = 2
"""Workers a page may kill before it is quarantined."""
DOCUMENT_DEATHS = 3
"""Workers the pages of one document may kill, all together, before the document is
(`workers.quarantine_document_deaths`)."""
MAX_ENTRIES = 10_000
"""Pages remembered (those that killed a worker once, and those quarantined)."""


class PageKey(NamedTuple):
    """A page by its content: the document's SHA-256 (hex) and the page's index (-1: the whole
    document, for work on all its pages, such as sizing them)."""

    digest: str
    page: int

    def describe(self) -> str:
        """For messages and logs."""
        document = f"document with SHA-256 {self.digest[:16]}…"
        return f"Page {self.page} of the {document}" if self.page >= 0 else f"The {document}"


class PageQuarantined(OcrError):
    """A page that killed CPU workers, refused without running it again."""

    http_status = 422
    code = "page_quarantined"
    default_message = "This page killed the server's workers and is not read again"


T = TypeVar("T")

_HASH_OFF_LOOP_BYTES = 1 << 20
"""Documents larger than this are hashed on a thread (hashlib lets go of the GIL)."""

_READING: contextvars.ContextVar[PageKey | None] = contextvars.ContextVar("page", default=None)


@contextlib.contextmanager
def reading(key: PageKey | None) -> Iterator[None]:
    """CPU pool calls made inside (in this task, and in tasks it creates) work on page `key`
    (None: on no page in particular)."""
    token = _READING.set(key)
    try:
        yield
    finally:
        _READING.reset(token)


async def read_as(key: PageKey, work: Awaitable[T]) -> T:
    """`await work`, its CPU pool calls on page `key` (`reading`)."""
    with reading(key):
        return await work


async def content_digest(data: bytes) -> str:
    """The SHA-256 of a document's bytes, in hex (on a thread when it is large)."""
    if len(data) <= _HASH_OFF_LOOP_BYTES:
        return hashlib.sha256(data).hexdigest()
    return await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())


def file_digest(path: str) -> str:
    """The SHA-256 of a stored document, in hex (blocking: call it on a thread)."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def page_read() -> PageKey | None:
    """The page the current task's CPU work is on (`reading`), if any."""
    return _READING.get()


class Quarantine:
    """Deaths of CPU workers per page, and the pages over `DEATHS`."""

    def __init__(
        self,
        *,
        deaths: int = DEATHS,
        document_deaths: int = DOCUMENT_DEATHS,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self.deaths = deaths
        self.document_deaths = document_deaths
        self._max_entries = max_entries
        self._seen: OrderedDict[PageKey, int] = OrderedDict()
        self._documents: OrderedDict[str, int] = OrderedDict()

    def check(self, key: PageKey | None) -> None:
        """Refuse a quarantined page, or a page of a quarantined document.

        Raises:
            PageQuarantined: `key` killed `deaths` workers already, or its document's pages
                `document_deaths`.
        """
        if key is None:
            return
        if self._documents.get(key.digest, 0) >= self.document_deaths:
            raise self._document_refusal(key)
        if self._seen.get(key, 0) >= self.deaths:
            raise self._refusal(key)

    def died(self, key: PageKey) -> PageQuarantined | None:
        """Count a worker that died running work on `key`; the refusal once it (or its
        document) is quarantined."""
        count = _bump(self._seen, key, self._max_entries)
        document = _bump(self._documents, key.digest, self._max_entries)
        if document >= self.document_deaths:
            return self._document_refusal(key)
        return self._refusal(key) if count >= self.deaths else None

    def _refusal(self, key: PageKey) -> PageQuarantined:
        return PageQuarantined(
            f"{key.describe()} killed {self.deaths} of this "
            "server's worker processes (a decoder crash, or its memory), so it is not read "
            "again: check the file, or send it converted (PNG, or a PDF printed anew)"
        )

    def _document_refusal(self, key: PageKey) -> PageQuarantined:
        document = PageKey(key.digest, -1).describe()
        return PageQuarantined(
            f"{document}'s pages killed {self.document_deaths} of this server's worker "
            "processes (a decoder crash, its memory, or its time), so none of its pages is read "
            "again: check the file, or send it converted (PNG, or a PDF printed anew)"
        )


def _bump(counts: OrderedDict[T, int], key: T, max_entries: int) -> int:
    """One more for `key`, now the newest entry; the oldest forgotten past `max_entries`."""
    count = counts.pop(key, 0) + 1
    counts[key] = count
    while len(counts) > max_entries:
        counts.popitem(last=False)
    return count
