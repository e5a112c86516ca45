"""A job's uploads staged with their pages counted in CPU worker processes (serving/jobs/files.py):
the server process itself never parses a document (issue 26)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pypdfium2
import pytest
from PIL import Image

from serving.decode.readers import DecodeLimits, FileKind
from serving.errors import InvalidInput, WorkerUnavailable
from serving.jobs.files import BatchLimits, stage_uploads
from serving.jobs.staging import WorkerCounter
from serving.workers.cpu_pool import CpuPool
from tests import images
from tests.fakes import cpu_calls

LIMITS = BatchLimits(max_files=8, max_pages=20, max_bytes=10_000_000, max_zip_entries=50)
DECODE = DecodeLimits(max_pdf_pages=10, pdf_render_scale=1.0, max_image_pixels=10**7)
PAGE = np.full((40, 60, 3), 255, np.uint8)


def _tiff(frames: int) -> bytes:
    pages = [Image.new("RGB", (30, 20), (40 * i, 0, 0)) for i in range(frames)]
    buf = io.BytesIO()
    pages[0].save(buf, format="TIFF", save_all=True, append_images=pages[1:])
    return buf.getvalue()


@pytest.fixture
async def pool() -> AsyncIterator[CpuPool]:
    pool = CpuPool(
        1,
        initializer=cpu_calls.init_crash_on_mark,
        initargs=(),
        max_attempts=2,
        restart_backoff_s=0.01,
    )
    pool.start()
    await pool.warm_up()
    try:
        yield pool
    finally:
        await pool.stop()


def _uploads(files: dict[str, bytes]) -> list[tuple[str, io.BytesIO]]:
    return [(name, io.BytesIO(data)) for name, data in files.items()]


async def _stage(pool: CpuPool, files: dict[str, bytes], dest: Path) -> list:
    count = WorkerCounter(pool, DECODE, timeout_s=120)
    return await asyncio.to_thread(stage_uploads, _uploads(files), dest, LIMITS, count)


@pytest.mark.anyio
async def test_pages_are_counted_in_a_worker_and_never_in_this_process(
    pool: CpuPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def parsed_here(*args: object, **kwargs: object) -> None:
        raise AssertionError("the server process parsed an uploaded document")

    # Every way into PIL and pdfium in this process fails; the worker's own copies are untouched.
    monkeypatch.setattr(Image, "open", parsed_here)
    monkeypatch.setattr(pypdfium2.raw, "FPDF_LoadDocument", parsed_here)
    monkeypatch.setattr(pypdfium2.raw, "FPDF_LoadMemDocument64", parsed_here)
    monkeypatch.setattr(pypdfium2, "PdfDocument", parsed_here)
    files = {
        "two.pdf": images.make_pdf([PAGE, PAGE]),
        "three.tiff": _tiff(3),
        "one.png": images.encode_png(PAGE),
    }
    documents = await _stage(pool, files, tmp_path / "files")
    assert [(d.name, d.pages) for d in documents] == [
        ("two.pdf", 2),
        ("three.tiff", 3),
        ("one.png", 1),
    ]


@pytest.mark.anyio
async def test_a_bad_document_is_refused_with_its_name(pool: CpuPool, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"^broken\.pdf: Invalid input file") as info:
        await _stage(pool, {"broken.pdf": b"%PDF-1.4 not really"}, tmp_path / "files")
    assert info.value.http_status == 422


@pytest.mark.anyio
async def test_a_worker_dying_on_a_document_fails_its_job_with_503_and_work_goes_on(
    pool: CpuPool, tmp_path: Path
) -> None:
    crash = cpu_calls.CRASH_MARK + b"\n%%EOF\n"
    with pytest.raises(WorkerUnavailable, match=r"^crash\.pdf: ") as info:
        await _stage(pool, {"ok.png": images.encode_png(PAGE), "crash.pdf": crash}, tmp_path / "a")
    assert info.value.http_status == 503
    assert pool.restarts >= 1  # the worker died (on each try) and was replaced
    documents = await _stage(pool, {"ok.pdf": images.make_pdf([PAGE])}, tmp_path / "b")
    assert [d.pages for d in documents] == [1]


def test_a_counter_is_all_staging_parses_with(tmp_path: Path) -> None:
    # No pool at all: what stage_uploads learns of each file comes from the counter it is given.
    seen: list[tuple[str, FileKind]] = []

    def count(path: Path, kind: FileKind) -> int:
        seen.append((path.name, kind))
        return 2

    files = {"a.pdf": b"%PDF-1.4 anything", "b.png": images.encode_png(PAGE)}
    documents = stage_uploads(_uploads(files), tmp_path, LIMITS, count)
    assert seen == [("1", "pdf"), ("2", "image")]
    assert [d.pages for d in documents] == [2, 2]
