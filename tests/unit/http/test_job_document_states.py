"""A job's documents and their status, read from a real SQLite job store: a document is ready
once none of its pages is still to run, and then says whether every page was done."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from serving.http.job_documents import (
    DocumentNotFound,
    _content_type,
    document_states,
    list_body,
    pick,
)
from serving.jobs.files import Document
from serving.jobs.store.sqlite import SqliteJobStore
from serving.outputs.formats import FORMATS


@pytest.fixture
def store(tmp_path: Path):
    built = SqliteJobStore(tmp_path / "jobs")
    built.open()
    yield built
    built.close()


def _create(store: SqliteJobStore, job_id: str, pages: tuple[int, ...]) -> None:
    files = store.job_dir(job_id) / "files"
    files.mkdir(parents=True)
    documents = []
    for i, count in enumerate(pages):
        path = files / str(i)
        path.write_bytes(b"%PDF-")
        documents.append(Document(name=f"doc{i}", path=path, kind="pdf", pages=count, size_bytes=5))
    store.create_job(job_id, documents, {})


def _run(store: SqliteJobStore, pages: int, *, fail: set[int] = frozenset()) -> None:
    """Claim and finish `pages` pages in order, failing those whose seq is in `fail`."""
    for _ in range(pages):
        task = store.claim_next()
        assert task is not None
        if task.seq in fail:
            store.fail_page(task.job_id, task.seq, "invalid_input", "bad page")
        else:
            line = json.dumps({"page": task.page, "width": 8, "height": 8, "lines": []})
            store.complete_page(task.job_id, task.seq, line.encode())


def _statuses(store: SqliteJobStore, job_id: str) -> list[tuple[str, int, int]]:
    states = asyncio.run(document_states(store, store.get_job(job_id)))
    return [(s.status, s.done, s.failed) for s in states]


def test_a_document_is_pending_until_its_pages_have_run(store: SqliteJobStore) -> None:
    _create(store, "a", (1, 3))
    assert _statuses(store, "a") == [("pending", 0, 0), ("pending", 0, 0)]
    _run(store, 2)
    assert _statuses(store, "a") == [("succeeded", 1, 0), ("pending", 1, 0)]
    _run(store, 2, fail={2})
    assert store.get_job("a").finished
    assert _statuses(store, "a") == [("succeeded", 1, 0), ("failed", 2, 1)]


def test_a_cancelled_jobs_documents_are_incomplete_not_pending(store: SqliteJobStore) -> None:
    _create(store, "b", (2, 1))
    _run(store, 1)
    store.cancel_job("b")
    assert _statuses(store, "b") == [("incomplete", 1, 0), ("incomplete", 0, 0)]
    info = store.get_job("b")
    body = list_body(info, asyncio.run(document_states(store, info)))
    assert body["status"] == "cancelled"
    assert [(d["index"], d["name"], d["pages"]) for d in body["documents"]] == [
        (0, "doc0", 2),
        (1, "doc1", 1),
    ]
    assert body["documents"][1]["href"] == "/v1/jobs/b/documents/1"


def test_pick_names_a_document_by_its_index(store: SqliteJobStore) -> None:
    _create(store, "c", (1, 1))
    states = asyncio.run(document_states(store, store.get_job("c")))
    assert pick(states, "1").file.name == "doc1"
    for bad in ("2", "-1", "x", ""):
        with pytest.raises(DocumentNotFound):
            pick(states, bad)


def test_a_documents_content_type_names_its_charset_once() -> None:
    """Job documents were sent as `text/plain; charset=utf-8; charset=utf-8`."""
    for fmt in FORMATS:
        assert _content_type(fmt).count("charset") <= 1, fmt
    assert _content_type("text") == "text/plain; charset=utf-8"
