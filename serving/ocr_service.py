"""One OCR request end to end: CPU stages in the pool, inference through the batching queues."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from pipelines.types import PageResult
from serving import cpu_stages, shm
from serving.batching import INTERACTIVE, Scheduler, WorkItem
from serving.cpu_pool import CpuPool, free_segments
from serving.engine import OcrOptions
from serving.errors import DeadlineExceeded, Overloaded
from serving.inputs import DecodeLimits, FileKind

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class PageOutput:
    """One page's result and, when asked for, its pictures."""

    result: PageResult
    images: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Admission:
    """Counts pages in flight and sheds load beyond the limit."""

    max_pages: int
    inflight: int = 0

    def admit(self, pages: int) -> None:
        """Reserve `pages`; raises Overloaded when the server is full."""
        if self.inflight > 0 and self.inflight + pages > self.max_pages:
            raise Overloaded(f"{self.inflight} pages in flight; limit {self.max_pages}")
        self.inflight += pages

    def release(self, pages: int) -> None:
        """Return `pages` reserved with `admit`."""
        self.inflight -= pages


@dataclass(slots=True)
class _Slot:
    """Pages one request holds in the admission count, and its deadline."""

    admission: Admission
    deadline: float
    pages: int = 1

    def grow_to(self, pages: int) -> None:
        """Hold `pages` in all; raises Overloaded (keeping what is held) when they do not fit."""
        self.admission.admit(pages - self.pages)
        self.pages = pages


class OcrService:
    """Runs documents through the CPU pool and the device workers."""

    def __init__(
        self,
        *,
        cpu: CpuPool,
        scheduler: Scheduler,
        limits: DecodeLimits,
        admission: Admission,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cpu = cpu
        self.scheduler = scheduler
        self.limits = limits
        self.admission = admission
        self._clock = clock

    async def ocr(
        self,
        data: bytes,
        kind: FileKind,
        options: OcrOptions,
        *,
        visualize: bool = False,
        timeout_s: float,
        priority: int = INTERACTIVE,
    ) -> list[PageOutput]:
        """OCR every page of a document.

        Raises:
            InvalidInput: the document does not decode or breaks a limit.
            Overloaded: too much work in flight.
            DeadlineExceeded: not done within `timeout_s`.
        """
        async with self._admitted(timeout_s) as slot:
            pages = await self.cpu.run(
                cpu_stages.prepare_document, data, kind, self.limits, options.det
            )
            try:
                slot.grow_to(len(pages))
                return await asyncio.gather(
                    *(
                        self._page(page, options, visualize, slot.deadline, priority)
                        for page in pages
                    )
                )
            finally:
                free_segments(pages)

    @contextlib.asynccontextmanager
    async def _admitted(self, timeout_s: float) -> AsyncIterator[_Slot]:
        """Admit one page (more with `grow_to`) for the work inside, bounded by `timeout_s`."""
        self.admission.admit(1)
        slot = _Slot(self.admission, deadline=self._clock() + timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                yield slot
        except TimeoutError as err:
            raise DeadlineExceeded() from err
        finally:
            self.admission.release(slot.pages)

    async def _page(
        self,
        page: cpu_stages.PreparedPage,
        options: OcrOptions,
        visualize: bool,
        deadline: float,
        priority: int,
    ) -> PageOutput:
        det_ref = page.det_tensor
        _, _, h, w = det_ref.shape
        prob_map = await self._infer("det", det_ref, (h, w), 1, h * w, deadline, priority)
        try:
            detected = await self.cpu.run(
                cpu_stages.after_det, page, prob_map, options.det, options.rec, options.cls
            )
        finally:
            shm.discard(prob_map)
        orientations: list[int] | None = None
        chunks = detected.rec_chunks
        try:
            if detected.cls_batches:
                probs = await self._infer_chunks("cls", detected.cls_batches, deadline, priority)
                orientations, chunks = await self.cpu.run(
                    cpu_stages.after_cls, detected, probs, options.rec
                )
            outputs = await self._infer_chunks("rec", chunks, deadline, priority)
        finally:
            free_segments(detected)
            free_segments(chunks)
        result, images = await self.cpu.run(
            cpu_stages.finish_page,
            page,
            detected.polys,
            [c.indices for c in chunks],
            outputs,
            orientations,
            options.rec,
            visualize,
        )
        return PageOutput(result=result, images=images)

    async def _infer_chunks(
        self, stage: str, chunks: list[cpu_stages.ChunkRef], deadline: float, priority: int
    ) -> list[Any]:
        if not chunks:
            return []
        return await asyncio.gather(
            *(
                self._infer(
                    stage,
                    c.tensor,
                    c.width,
                    len(c.indices),
                    c.width * len(c.indices),
                    deadline,
                    priority,
                )
                for c in chunks
            )
        )

    async def _infer(
        self,
        stage: str,
        payload: shm.ShmRef,
        bucket: Any,
        count: int,
        cost: int,
        deadline: float,
        priority: int,
    ) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        item = WorkItem(
            stage=stage,
            bucket=bucket,
            payload=payload,
            count=count,
            cost=cost,
            priority=priority,
            deadline=deadline,
            future=future,
        )
        self.scheduler.submit(item)
        try:
            return await future
        except asyncio.CancelledError:
            future.cancel()
            raise

    async def ocr_page_of(
        self,
        source: bytes | str,
        kind: FileKind,
        page_index: int,
        options: OcrOptions,
        *,
        priority: int,
        timeout_s: float,
    ) -> PageOutput:
        """OCR one page of a document: page `page_index` of a PDF, or an image (index 0).

        `source` is the file's bytes or its path, which the CPU worker reads (a long PDF is not
        copied for each page). Batch jobs call this once per page, at background priority.

        Raises:
            InvalidInput: the page does not decode or breaks a limit.
            Overloaded: too much work in flight.
            DeadlineExceeded: not done within `timeout_s`.
        """
        async with self._admitted(timeout_s) as slot:
            page = await self.cpu.run(
                cpu_stages.prepare_page_of, source, kind, page_index, self.limits, options.det
            )
            try:
                return await self._page(page, options, False, slot.deadline, priority)
            finally:
                free_segments(page)
