"""Unit tests for serving/service/job_pages.py: a job page goes to the OCR service at background
priority, within the jobs' page timeout, with its job's options made as a request's are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from models.bundle import load_bundle
from models.torch_options import TorchOptions
from serving.config import AppConfig, JobsConfig, ServerConfig
from serving.errors import Overloaded
from serving.jobs.runner import JobRunner
from serving.jobs.store.types import PageTask
from serving.metrics import Metrics
from serving.scheduling.batch_shapes import BatchShapes
from serving.scheduling.priorities import BACKGROUND
from serving.service.job_pages import job_page_ocr, job_runner

pytestmark = pytest.mark.anyio


class Service:
    """Records what `OcrService.ocr_page_of` is called with, and sheds the page."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    async def ocr_page_of(
        self, *args: Any, priority: int, timeout_s: float, digest: str | None
    ) -> object:
        self.seen.update(options=args[3], priority=priority, timeout_s=timeout_s)
        raise Overloaded()


def _task(path: Path, options: dict[str, Any] | None = None) -> PageTask:
    return PageTask(
        job_id="j",
        seq=0,
        file_index=0,
        file_name="a.png",
        page=0,
        kind="image",
        path=path,
        options=options or {},
    )


async def test_job_pages_go_at_background_priority_with_the_jobs_page_timeout(
    tmp_path: Path,
) -> None:
    """Not the request timeout: a job page may wait behind interactive work for its share."""
    config = AppConfig(
        server=ServerConfig(request_timeout_s=30.0),
        jobs=JobsConfig(data_dir=str(tmp_path / "jobs"), page_timeout_s=1234.0),
    )
    models = config.models
    bundle = load_bundle(models.det, models.rec, models.cls)
    service = Service()
    runner = job_runner(config, service, bundle, Metrics())  # type: ignore[arg-type]
    assert isinstance(runner, JobRunner)
    with pytest.raises(Overloaded):
        await runner._ocr(_task(tmp_path))
    assert {k: service.seen[k] for k in ("priority", "timeout_s")} == {
        "priority": BACKGROUND,
        "timeout_s": 1234.0,
    }


async def test_a_job_page_has_its_options_and_the_servers_batch_shapes(tmp_path: Path) -> None:
    """The options are finished where a request's are (`serving.request_options`): the job's
    own, under their API names, and the padding of bucketed batching; an option this version
    does not know (stored by another) is dropped."""
    config = AppConfig(jobs=JobsConfig(data_dir=str(tmp_path / "jobs")))
    models = config.models
    bundle = load_bundle(models.det, models.rec, models.cls)
    shapes = BatchShapes.of("bucketed", TorchOptions())
    assert shapes is not None
    service = Service()
    ocr = job_page_ocr(config, service, bundle, shapes=shapes)  # type: ignore[arg-type]
    with pytest.raises(Overloaded):
        await ocr(_task(tmp_path, {"det_thresh": 0.25, "from_elsewhere": 1}))
    options = service.seen["options"]
    assert options.det.thresh == 0.25
    assert options.det.pad_step_px == shapes.det_step_px > 0
    assert options.rec.pad_widths_px == shapes.rec_widths_px
