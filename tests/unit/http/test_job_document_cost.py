"""A job document's PDF is charged for its image as sent, read from the upload's headers, not for
the page OCR read (issue 37, item 7): that page is scaled to `input.max_page_side_px`, while the
PDF embeds the upload whole (up to `input.max_image_pixels`, ~179 Mpx). Real SQLite store, real
rendering in this process."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from serving.config import JobsConfig
from serving.decode.readers import DecodeLimits
from serving.errors import InsufficientStorage, PayloadTooLarge, StoredQuotaExceeded
from serving.http.job_documents import DocumentState, OutputRoom, document_states, rendered
from serving.jobs.document_files import SOURCE_BYTES_PER_PX
from serving.jobs.files import Document
from serving.jobs.runner import JobRunner
from serving.jobs.store.sqlite import SqliteJobStore
from serving.jobs.store.types import StoredLimits
from serving.scheduling.memory_budget import MemoryBudget
from serving.service.requests import JobRequests
from tests.fakes.service import InlineCpuPool

MIB = 1 << 20
SIDE = 3000
"""The upload's side; OCR read it at 1000 px."""
LIMITS = DecodeLimits(
    max_pdf_pages=10, pdf_render_scale=1.0, max_image_pixels=1 << 28, max_page_side_px=1000
)


async def _never(task: object) -> object:
    raise AssertionError("no page runs here")


@pytest.fixture
def runner(tmp_path: Path):
    store = SqliteJobStore(tmp_path / "jobs")
    store.open()
    files = store.job_dir("j") / "files"
    files.mkdir(parents=True)
    buf = io.BytesIO()
    Image.new("RGB", (SIDE, SIDE), "white").save(buf, format="PNG")
    (files / "1").write_bytes(buf.getvalue())
    document = Document(
        name="big.png", path=files / "1", kind="image", pages=1, size_bytes=len(buf.getvalue())
    )
    store.create_job("j", [document], {})
    task = store.claim_next()
    assert task is not None
    record = {"page": 0, "width": 1000, "height": 1000, "lines": []}  # as OCR read it
    store.complete_page("j", task.seq, json.dumps(record).encode())
    yield JobRunner(store=store, ocr=_never, config=JobsConfig())  # type: ignore[arg-type]
    store.close()


def _render(runner: JobRunner, budget: MemoryBudget, room: OutputRoom | None = None) -> Path:
    jobs = JobRequests(
        runner=runner,
        config=runner.config,
        cpu=InlineCpuPool(),  # type: ignore[arg-type]
        limits=LIMITS,
        budget=budget,
    )

    async def main() -> Path:
        (state,) = await document_states(runner.store, runner.store.get_job("j"))
        assert isinstance(state, DocumentState)
        return await rendered(jobs, runner, "j", state, "pdf", room=room)

    return asyncio.run(main())


def test_a_pdf_of_an_image_is_charged_for_the_image_as_sent(runner: JobRunner) -> None:
    needs = SOURCE_BYTES_PER_PX * SIDE * SIDE  # ~137 MiB; the OCR page's 1 Mpx, ~4 MiB before
    with pytest.raises(PayloadTooLarge, match=r"server\.memory_budget_bytes"):
        _render(runner, MemoryBudget(needs - MIB))
    budget = MemoryBudget(needs + 64 * MIB)
    path = _render(runner, budget)
    assert path.read_bytes().startswith(b"%PDF")
    assert budget.used_bytes == 0


def test_an_output_is_written_only_within_the_owners_bytes_and_the_free_disk(
    runner: JobRunner, tmp_path: Path
) -> None:
    """Issue 49: outputs went to disk outside the stored bytes and the free-disk check, and did
    not count for the owner's next submits."""
    budget = MemoryBudget(1 << 32)
    upload = runner.store.usage(None).bytes
    no_disk = OutputRoom(None, StoredLimits(), tmp_path, min_free_disk_bytes=1 << 60)
    with pytest.raises(InsufficientStorage, match=r"jobs\.min_free_disk_bytes"):
        _render(runner, budget, no_disk)
    tight = OutputRoom(None, StoredLimits(max_bytes=upload + 1000), tmp_path, 0)
    with pytest.raises(StoredQuotaExceeded, match="rendered outputs included"):
        _render(runner, budget, tight)
    assert not list((runner.store.job_dir("j") / "outputs").glob("*.pdf"))
    roomy = OutputRoom(None, StoredLimits(max_bytes=upload + 64 * MIB), tmp_path, 0)
    path = _render(runner, budget, roomy)
    assert runner.store.usage(None).bytes == upload + path.stat().st_size  # counted from now on
