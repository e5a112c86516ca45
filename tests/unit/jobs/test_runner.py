"""Unit tests for serving/jobs/runner.py with a fake page OCR: no predictors, no processes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from pipelines.types import PageResult, TextLine
from serving.config import JobsConfig
from serving.errors import DeadlineExceeded, InvalidInput, Overloaded, WorkerUnavailable
from serving.jobs.files import Document
from serving.jobs.runner import MAX_ATTEMPTS, JobRunner
from serving.jobs.store.sqlite import SqliteJobStore as JobStore
from serving.jobs.store.types import JobNotFound, PageTask
from serving.metrics import Metrics

pytestmark = pytest.mark.anyio


class FakeOcr:
    """Answers each page with one line naming it; can hold pages, or fail some."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.inflight = 0
        self.max_inflight = 0
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()
        self.two_in_flight = asyncio.Event()
        self.fail: dict[tuple[int, int], list[Exception]] = {}

    async def __call__(self, task: PageTask) -> PageResult:
        self.calls.append((task.file_name, task.page))
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        if self.inflight == 2:
            self.two_in_flight.set()
        self.started.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(0)
            errors = self.fail.get((task.file_index, task.page))
            if errors:
                raise errors.pop(0)
        finally:
            self.inflight -= 1
        line = TextLine(
            text=f"{task.file_name}:{task.page}", score=0.9, poly=np.zeros((4, 2), np.int16)
        )
        return PageResult(width=10, height=20, lines=[line])


def _runner(tmp_path: Path, ocr: FakeOcr, **config: float) -> JobRunner:
    jobs = JobsConfig(data_dir=str(tmp_path / "jobs"), max_inflight_pages=2, **config)  # type: ignore[arg-type]
    return JobRunner(
        store=JobStore(tmp_path / "jobs"),
        ocr=ocr,
        config=jobs,
        metrics=Metrics(),
        sweep_interval_s=0.01,
        retry_backoff_s=0.001,
    )


async def _submit(runner: JobRunner, job_id: str, pages: tuple[int, ...]) -> None:
    await runner.open()
    files = runner.store.job_dir(job_id) / "files"
    files.mkdir(parents=True)
    documents = []
    for i, count in enumerate(pages):
        (files / str(i)).write_bytes(b"x")
        documents.append(
            Document(
                name=f"doc{i}",
                path=files / str(i),
                kind="pdf" if count > 1 else "image",
                pages=count,
                size_bytes=1,
            )
        )
    await runner.submit(job_id, documents, {})


async def _until_finished(runner: JobRunner, job_id: str) -> None:
    async with asyncio.timeout(10):
        while True:
            changed = runner.events.watch(job_id)
            if (await runner.get(job_id)).finished:
                return
            await changed.wait()


def _results(runner: JobRunner, job_id: str) -> list[tuple[str, int]]:
    _, pages = runner.store.finished_pages(job_id)
    texts = []
    for page in pages:
        record = json.loads(runner.store.read_result(job_id, page.seq))
        texts.append((record["lines"][0]["text"], record["file_index"]))
    return sorted(texts)


async def test_runs_every_page_once_within_the_inflight_bound(tmp_path: Path) -> None:
    ocr = FakeOcr()
    ocr.gate = asyncio.Event()
    runner = _runner(tmp_path, ocr)
    await runner.start()
    try:
        await _submit(runner, "a", (1, 4, 1))
        async with asyncio.timeout(10):
            await ocr.two_in_flight.wait()
        await asyncio.sleep(0.1)  # room for a third page to start, if the bound were broken
        assert len(ocr.calls) == 2
        ocr.gate.set()
        await _until_finished(runner, "a")
        info = await runner.get("a")
        assert (info.status, info.pages_done) == ("succeeded", 6)
        assert sorted(ocr.calls) == sorted(
            [("doc0", 0), ("doc1", 0), ("doc1", 1), ("doc1", 2), ("doc1", 3), ("doc2", 0)]
        )
        assert ocr.max_inflight == 2
        assert _results(runner, "a") == [
            ("doc0:0", 0),
            ("doc1:0", 1),
            ("doc1:1", 1),
            ("doc1:2", 1),
            ("doc1:3", 1),
            ("doc2:0", 2),
        ]
        assert runner._metrics is not None
        registry = runner._metrics.registry
        assert registry.get_sample_value("ocr_jobs", {"status": "succeeded"}) == 1
        assert registry.get_sample_value("ocr_jobs", {"status": "running"}) == 0
    finally:
        await runner.stop()


async def test_passing_errors_are_retried_and_bad_pages_fail(tmp_path: Path) -> None:
    ocr = FakeOcr()
    ocr.fail[(0, 0)] = [Overloaded()] * (MAX_ATTEMPTS + 2)  # waits its turn however long
    ocr.fail[(0, 1)] = [WorkerUnavailable()]
    ocr.fail[(0, 2)] = [InvalidInput("page 3 does not decode")]
    ocr.fail[(0, 3)] = [DeadlineExceeded()] * MAX_ATTEMPTS
    runner = _runner(tmp_path, ocr)
    await runner.start()
    try:
        await _submit(runner, "a", (4,))
        await _until_finished(runner, "a")
        info = await runner.get("a")
        assert (info.status, info.pages_done, info.pages_failed) == ("failed", 2, 2)
        assert [(p.page, p.code) for p in info.failed] == [
            (2, "invalid_input"),
            (3, "deadline_exceeded"),
        ]
        assert info.failed[0].message == "page 3 does not decode"
        assert ocr.calls.count(("doc0", 0)) == MAX_ATTEMPTS + 3
        assert ocr.calls.count(("doc0", 1)) == 2
        assert ocr.calls.count(("doc0", 2)) == 1
        assert ocr.calls.count(("doc0", 3)) == MAX_ATTEMPTS
    finally:
        await runner.stop()


async def test_cancel_drops_pages_in_flight(tmp_path: Path) -> None:
    ocr = FakeOcr()
    ocr.gate = asyncio.Event()
    runner = _runner(tmp_path, ocr)
    await runner.start()
    try:
        await _submit(runner, "a", (5,))
        await ocr.started.wait()
        info = await runner.cancel("a")
        assert info.status == "cancelled"
        ocr.gate.set()
        await asyncio.sleep(0.05)
        after = await runner.get("a")
        assert after.status == "cancelled"
        assert after.pages_done == 0
        assert len(ocr.calls) == 2  # only the two in flight ever started
    finally:
        await runner.stop()


async def test_stop_and_restart_completes_each_page_once(tmp_path: Path) -> None:
    ocr = FakeOcr()
    runner = _runner(tmp_path, ocr)
    await runner.start()
    await _submit(runner, "a", (6,))
    await _until_first_page(runner, "a")
    ocr.gate = asyncio.Event()  # hold the pages in flight when the server stops
    await runner.stop()
    done_before = await _reopened_count(tmp_path)
    assert 1 <= done_before < 6

    again_ocr = FakeOcr()
    again = _runner(tmp_path, again_ocr)
    await again.start()
    try:
        await _until_finished(again, "a")
        info = await again.get("a")
        assert (info.status, info.pages_done) == ("succeeded", 6)
        assert [text for text, _ in _results(again, "a")] == [f"doc0:{i}" for i in range(6)]
        assert len(again_ocr.calls) == 6 - done_before
    finally:
        await again.stop()


async def _until_first_page(runner: JobRunner, job_id: str) -> None:
    async with asyncio.timeout(10):
        while True:
            changed = runner.events.watch(job_id)
            if (await runner.get(job_id)).pages_done >= 1:
                return
            await changed.wait()


async def _reopened_count(tmp_path: Path) -> int:
    store = JobStore(tmp_path / "jobs")
    store.open()
    try:
        return store.get_job("a").pages_done
    finally:
        store.close()


async def test_retention_deletes_finished_jobs(tmp_path: Path) -> None:
    ocr = FakeOcr()
    runner = _runner(tmp_path, ocr, retention_s=0.05)
    await runner.start()
    try:
        await _submit(runner, "a", (1,))
        await _until_finished(runner, "a")
        deleted = runner.events.watch("a")
        async with asyncio.timeout(10):
            await deleted.wait()
        with pytest.raises(JobNotFound):
            await runner.get("a")
        assert not runner.store.job_dir("a").exists()
    finally:
        await runner.stop()


async def test_nothing_is_created_until_a_job_comes(tmp_path: Path) -> None:
    runner = _runner(tmp_path, FakeOcr())
    await runner.start()
    try:
        assert await runner.list(status=None, limit=10) == []
        with pytest.raises(JobNotFound):
            await runner.get("nope")
        assert not (tmp_path / "jobs").exists()
    finally:
        await runner.stop()


async def test_a_job_left_queued_past_its_expiry_fails_expired(tmp_path: Path) -> None:
    """Both slots held by a running job: the job queued behind it expires, the running one not."""
    ocr = FakeOcr()
    ocr.gate = asyncio.Event()
    runner = _runner(tmp_path, ocr, queued_expiry_s=0.05)
    await runner.start()
    try:
        await _submit(runner, "busy", (2,))
        async with asyncio.timeout(10):
            await ocr.two_in_flight.wait()
        await _submit(runner, "waiting", (1, 1))
        await _until_finished(runner, "waiting")
        info = await runner.get("waiting")
        assert (info.status, info.pages_failed) == ("failed", 2)
        assert {page.code for page in info.failed} == {"expired"}
        assert (await runner.get("busy")).status == "running"
        ocr.gate.set()
        await _until_finished(runner, "busy")
        assert (await runner.get("busy")).status == "succeeded"
        assert len(ocr.calls) == 2  # busy's two pages; none of the expired job's
    finally:
        await runner.stop()
