"""Staging's policy (serving/jobs/staging.py), with each document read in this process: the job's
decoded pixels capped and a conversion's frame charged from the headers, and uploads per client
capped. The server's own behaviour is `tests/e2e/test_job_staging.py`'s."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
from PIL import Image

from serving.decode.readers import DecodeLimits
from serving.errors import PayloadTooLarge, QuotaExceeded
from serving.jobs.staging import STAGING_BYTES_PER_PX, UploadSlots, WorkerCounter
from serving.scheduling.memory_budget import MemoryBudget
from tests.fakes.service import InlineCpuPool

LIMITS = DecodeLimits(
    max_pdf_pages=10, pdf_render_scale=1.0, max_image_pixels=10**8, max_page_side_px=50
)


def _gif(path: Path, side: int, frames: int) -> Path:
    pictures = [Image.new("RGB", (side, side), (40 * i, 0, 0)) for i in range(frames)]
    buf = io.BytesIO()
    pictures[0].save(buf, format="GIF", save_all=True, append_images=pictures[1:], duration=10)
    path.write_bytes(buf.getvalue())
    return path


def _count(path: Path, **kwargs: object) -> int:
    async def main() -> int:
        counter = WorkerCounter(InlineCpuPool(), LIMITS, timeout_s=60, **kwargs)  # type: ignore[arg-type]
        return await asyncio.to_thread(counter, path, "image")

    return asyncio.run(main())


def test_a_conversion_over_the_pixel_cap_is_refused_before_decoding(tmp_path: Path) -> None:
    gif = _gif(tmp_path / "a.gif", 100, 4)  # 4 x 10,000 pixels
    with pytest.raises(PayloadTooLarge, match=r"jobs\.max_staging_pixels"):
        _count(gif, max_decoded_pixels=39_999)
    assert gif.read_bytes().startswith(b"GIF")  # not converted
    assert _count(gif, max_decoded_pixels=40_000) == 4
    with Image.open(gif) as tiff:  # converted, each frame at max_page_side_px
        assert (tiff.format, tiff.n_frames, tiff.size) == ("TIFF", 4, (50, 50))


def test_a_frame_that_could_never_fit_the_budget_is_refused(tmp_path: Path) -> None:
    gif = _gif(tmp_path / "a.gif", 100, 2)
    with pytest.raises(PayloadTooLarge, match=r"server\.memory_budget_bytes"):
        _count(gif, budget=MemoryBudget(STAGING_BYTES_PER_PX * 10_000 - 1))
    budget = MemoryBudget(STAGING_BYTES_PER_PX * 10_000)
    assert _count(gif, budget=budget) == 2
    assert budget.used_bytes == 0


def test_uploads_at_once_are_capped_per_client() -> None:
    slots = UploadSlots(2)
    with slots.hold("key:a"), slots.hold("key:a"):
        with pytest.raises(QuotaExceeded, match=r"jobs\.max_uploads_per_key"):
            slots.hold("key:a").__enter__()
        with slots.hold("key:b"):
            pass
    with slots.hold("key:a"), slots.hold("key:a"):
        pass
