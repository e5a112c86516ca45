"""`ocr-batch` in process: the server's own runtime (CPU pool, scheduler, device workers) without
HTTP, fed one page at a time at background priority, each page into the manifest as it is done."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from serving.batch.manifest import Manifest, PageKey
from serving.batch.plan import BatchError, PageTodo
from serving.config import AppConfig
from serving.errors import OcrError
from serving.jobs.options import page_record
from serving.request_options import NO_CLASSIFIER
from serving.scheduling.priorities import BACKGROUND

Progress = Callable[[int], "tqdm[Any]"]
"""Makes the progress bar for a number of pages."""

MAX_ATTEMPTS = 3
"""Tries of a page that meets a passing condition (503 or 504)."""


async def run_local(
    config: AppConfig,
    todo: list[PageTodo],
    manifest: Manifest,
    concurrency: int,
    progress: Progress,
) -> dict[PageKey, dict[str, Any]]:
    """OCR `todo` with an in-process runtime; returns the pages that failed, with their errors."""
    # The server's parts: loaded only for in-process runs.
    from serving.service.runtime import Runtime

    failures: dict[PageKey, dict[str, Any]] = {}
    runtime = Runtime.build(config, jobs=False)
    try:  # before any model loads: a classifier asked for and not configured stops the run
        options = runtime.request_options(manifest.options, no_classifier=NO_CLASSIFIER)
    except OcrError as err:
        raise BatchError(err.message) from err
    queue = list(reversed(todo))
    try:
        await runtime.start()
        with progress(len(todo)) as bar:

            async def worker() -> None:
                while queue:
                    doc, page = queue.pop()
                    key = (doc.sha256, page)
                    for attempt in range(1, MAX_ATTEMPTS + 1):
                        try:
                            out = await runtime.service.ocr_page_of(
                                str(doc.path),
                                doc.kind,
                                page,
                                options,
                                priority=BACKGROUND,
                                timeout_s=config.jobs.page_timeout_s,
                            )
                        except OcrError as err:
                            if err.http_status in (503, 504) and attempt < MAX_ATTEMPTS:
                                continue
                            failures[key] = {"code": err.code, "message": err.message}
                            bar.write(f"ocr-batch: {doc.name} page {page + 1}: {err.message}")
                        else:
                            record = page_record(doc.name, page, out.result, sha256=doc.sha256)
                            await asyncio.to_thread(manifest.append, key, record)
                        break
                    bar.update(1)

            await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    finally:
        await runtime.stop()
    return failures
