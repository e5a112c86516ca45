"""The job runner wired to the OCR service: each job page through `OcrService.ocr_page_of` at
background priority, read with its job's options.

The runner (`serving.jobs.runner`) knows a page only as a `PageOcr` to call; the service is what
the runtime hands it, so the jobs need nothing from `serving.service`.
"""

from __future__ import annotations

import asyncio
import functools

from models.bundle import ModelBundle
from pipelines.types import PageResult
from serving import tracing
from serving.config import AppConfig
from serving.jobs.credentials import CredentialStore
from serving.jobs.outbox import Outbox
from serving.jobs.runner import JobRunner, PageOcr
from serving.jobs.store import build_store
from serving.jobs.store.types import PageTask
from serving.metrics import Metrics
from serving.model_sets import ModelSets
from serving.options import OPTIONS
from serving.request_options import ocr_options
from serving.scheduling.batch_shapes import BatchShapes
from serving.scheduling.priorities import BACKGROUND
from serving.service.ocr import OcrService
from serving.workers.quarantine import file_digest


def job_page_ocr(
    config: AppConfig,
    service: OcrService,
    bundle: ModelBundle,
    *,
    sets: ModelSets | None = None,
    shapes: BatchShapes | None = None,
) -> PageOcr:
    """OCR of one job page through `service` at background priority within
    `jobs.page_timeout_s`, read by the model set its job's options pick (`lang`, `model`)."""
    timeout_s = config.jobs.page_timeout_s
    # A stored document never changes: hashed once for its pages (`serving.workers.quarantine`).
    digests = functools.lru_cache(maxsize=256)(file_digest)

    async def ocr(task: PageTask) -> PageResult:
        # Checked when the job was submitted; one another version stored may hold an option this
        # one does not know, which is dropped.
        given = {name: value for name, value in task.options.items() if name in OPTIONS}
        options = ocr_options(bundle, config.pipeline, sets=sets, shapes=shapes, **given)
        try:
            digest = await asyncio.to_thread(digests, str(task.path))
        except OSError:
            digest = None  # gone: the worker says so
        # A trace of its own: no request waits on a job page (`serving.tracing`).
        with tracing.root_span(
            "job.page",
            **{"ocr.job_id": task.job_id, "ocr.file": task.file_index, "ocr.page": task.page},
        ):
            output = await service.ocr_page_of(
                str(task.path),
                task.kind,
                task.page,
                options,
                priority=BACKGROUND,
                timeout_s=timeout_s,
                digest=digest,
            )
        return output.result

    return ocr


def job_runner(
    config: AppConfig,
    service: OcrService,
    bundle: ModelBundle,
    metrics: Metrics,
    *,
    credentials: CredentialStore | None = None,
    sets: ModelSets | None = None,
    shapes: BatchShapes | None = None,
) -> JobRunner:
    """A runner over the configured store whose pages go through `service` (`job_page_ocr`),
    and whose jobs' webhooks and exports an outbox sends with `credentials` (default: read
    from `config`'s files when first needed)."""
    ocr = job_page_ocr(config, service, bundle, sets=sets, shapes=shapes)
    store = build_store(config.jobs)
    outbox = Outbox(
        store=store,
        config=config,
        credentials=credentials or CredentialStore(config),
        metrics=metrics,
    )
    return JobRunner(store=store, ocr=ocr, config=config.jobs, metrics=metrics, outbox=outbox)
