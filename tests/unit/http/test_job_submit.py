"""`POST /v1/jobs` when submitting fails (issue 26, item 9): a job whose row was committed keeps
its uploaded files; the files of a job never recorded are left to the store's orphan sweep."""

from __future__ import annotations

import asyncio
import os
import time
import types
from pathlib import Path
from typing import Any, NoReturn, cast

import httpx
import pytest

from serving.app import build_app
from serving.config import AppConfig, JobsConfig
from serving.decode.readers import DecodeLimits
from serving.jobs.files import Document
from serving.jobs.runner import JobRunner
from serving.jobs.store.job_dirs import ORPHAN_MIN_AGE_S
from serving.jobs.store.sqlite import SqliteJobStore
from serving.jobs.store.types import JobStoreUnavailable, PageTask
from serving.metrics import Metrics
from serving.scheduling.memory_budget import MemoryBudget
from serving.service.requests import JobRequests
from serving.service.runtime import Runtime
from tests import images
from tests.fakes.service import InlineCpuPool

PNG = images.encode_png(images.latin_lines().image)


async def _never(task: PageTask) -> object:
    raise AssertionError("no page runs here")


def _runtime(store: SqliteJobStore) -> Runtime:
    runner = JobRunner(store=store, ocr=_never, config=JobsConfig())  # type: ignore[arg-type]
    config, metrics, budget = AppConfig(), Metrics(), MemoryBudget(1 << 30)
    jobs = JobRequests(
        runner=runner,
        config=config.jobs,
        cpu=InlineCpuPool(),  # type: ignore[arg-type]  # counts the upload's pages in this process
        limits=DecodeLimits(max_pdf_pages=10, pdf_render_scale=2.0, max_image_pixels=1 << 26),
        budget=budget,
    )
    services = types.SimpleNamespace(
        config=config,
        metrics=metrics,
        budget=budget,
        jobs=jobs,
        ocr=types.SimpleNamespace(options=lambda *args, **kwargs: None),
    )
    return cast(
        Runtime,
        types.SimpleNamespace(
            config=config, metrics=metrics, jobs=runner, endpoint_services=lambda: services
        ),
    )


def _submit_failing(runner: JobRunner, *, commit: bool) -> list[str]:
    """Make `runner.submit` fail, after committing the job's row when `commit` (as a commit
    whose answer was lost); returns the ids it was called with."""
    seen: list[str] = []

    async def submit(job_id: str, documents: list[Document], *args: Any, **kwargs: Any) -> NoReturn:
        seen.append(job_id)
        if commit:
            await asyncio.to_thread(runner.store.create_job, job_id, documents, {})
        raise JobStoreUnavailable("connection lost during COMMIT")

    runner.submit = submit  # type: ignore[method-assign]
    return seen


async def _post(runtime: Runtime) -> httpx.Response:
    app = build_app(runtime, environ={})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.post("/v1/jobs", files={"file": ("a.png", PNG, "image/png")})


@pytest.mark.parametrize("commit", [True, False], ids=["row-committed", "row-never-written"])
def test_a_failed_submit_keeps_the_files(tmp_path: Path, commit: bool) -> None:
    store = SqliteJobStore(tmp_path / "jobs")
    runtime = _runtime(store)
    runner = cast(JobRunner, runtime.jobs)
    seen = _submit_failing(runner, commit=commit)
    try:
        response = asyncio.run(_post(runtime))
        assert response.status_code == 503, response.text
        (job_id,) = seen
        files = store.job_dir(job_id) / "files"
        assert [p.read_bytes() for p in files.iterdir()] == [PNG]
        if commit:  # the job exists and can read its pages
            assert store.get_job(job_id).pages_total == 1
    finally:
        store.close()


def test_the_orphan_sweep_removes_only_old_directories_without_a_row(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path / "jobs")
    runtime = _runtime(store)
    runner = cast(JobRunner, runtime.jobs)
    seen = _submit_failing(runner, commit=True)
    try:
        asyncio.run(_post(runtime))
        asyncio.run(_post(runtime))
        _submit_failing(runner, commit=False)
        asyncio.run(_post(runtime))
        asyncio.run(_post(runtime))
        recorded_old, recorded_new = seen
        orphan_old, orphan_new = (
            p.name for p in store.jobs_root.iterdir() if p.name not in (recorded_old, recorded_new)
        )
        long_ago = time.time() - ORPHAN_MIN_AGE_S - 60
        for job_id in (recorded_old, orphan_old):
            os.utime(store.job_dir(job_id), (long_ago, long_ago))
        assert store.purge_expired(retention_s=1.0) == []  # no job has finished
        left = {p.name for p in store.jobs_root.iterdir()}
        assert left == {recorded_old, recorded_new, orphan_new}
    finally:
        store.close()
