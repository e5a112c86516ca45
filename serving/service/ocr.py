"""One OCR request end to end: CPU stages in the pool, inference through the batching queues."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np

from pipelines.types import DetParams, PageResult
from serving import tracing
from serving.decode.documents import PagePlan
from serving.decode.page_png import page_png
from serving.decode.readers import DecodeLimits, FileKind, fit_side
from serving.errors import DeadlineExceeded
from serving.request_options import OcrOptions
from serving.scheduling.admission import Admission
from serving.scheduling.batching import Scheduler, WorkItem
from serving.scheduling.memory_budget import Held, MemoryBudget
from serving.scheduling.page_memory import MIN_SCALED_SIDE_PX, PageCosts
from serving.scheduling.priorities import BACKGROUND, INTERACTIVE
from serving.scheduling.quotas import KeyPages, Tenant
from serving.workers import cpu_stages, shm
from serving.workers.cpu_pool import CpuPool
from serving.workers.page_pictures import PictureLimits
from serving.workers.quarantine import PageKey, content_digest, read_as, reading
from serving.workers.supervisor import free_segments

logger = logging.getLogger(__name__)

T = TypeVar("T")

_SET_STAGES: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "set_stages", default=MappingProxyType({})
)
"""The page's model set, as `OcrOptions.stages`: model kind -> the stage (queue) running it. Set
once per page by `_document_page`, read by `_infer` in the tasks the page's steps start (each
copies its context), so a request whose `lang` picked another set is batched in that set's
queues without every step passing it on."""


@dataclass(slots=True)
class PageOutput:
    """One page's result and, when asked for, its pictures."""

    result: PageResult
    images: dict[str, str] = field(default_factory=dict)
    scaled_from: tuple[int, int] | None = None
    """(width, height) the page was sent at, when it was decoded smaller (`PageCharge`)."""

    def scaled_note(self) -> dict[str, Any]:
        """`{"scaled_from": {"width": ..., "height": ...}}` for a page decoded smaller than it was
        sent (its `width`, `height` and boxes are then in the smaller page's pixels), else {}."""
        if self.scaled_from is None:
            return {}
        width, height = self.scaled_from
        return {"scaled_from": {"width": width, "height": height}}


TURNED_COPY_BYTES_PER_PX = 3
"""A page the orientation classifier turns is read from a BGR copy of it, upright
(`cpu_stages.OrientedPage`)."""


@dataclass(frozen=True, slots=True)
class PageCharge:
    """How one page is decoded and what it costs the memory budget."""

    cost: int
    det_cost: int
    """Of `cost`, what detection holds: given back as soon as the page's detection is done."""
    limits: DecodeLimits
    """The server's limits, with a lower `max_page_side_px` for a page scaled to fit."""
    sent: tuple[int, int] | None
    """(width, height) as sent when the page is decoded smaller, else None."""


@dataclass(slots=True, kw_only=True)
class _Slot:
    """Pages one request holds in the admission count (and in its API key's), and its deadline."""

    admission: Admission
    key_pages: KeyPages
    tenant: Tenant | None
    deadline: float
    clock: Callable[[], float]
    pages: int = 0

    def grow_to(self, pages: int) -> None:
        """Hold `pages` in all; raises QuotaExceeded (over the key's own cap) or Overloaded,
        keeping what is held, when they do not fit."""
        more, held = pages - self.pages, self.pages
        if self.tenant is not None:
            self.key_pages.admit(self.tenant.id, self.tenant.quota, more, held=held)
        try:
            self.admission.admit(more, deadline_s=self.deadline - self.clock(), held=held)
        except BaseException:
            if self.tenant is not None:
                self.key_pages.release(self.tenant.id, more)
            raise
        self.pages = pages

    def release(self) -> None:
        """Give back every page held."""
        self.admission.release(self.pages)
        if self.tenant is not None:
            self.key_pages.release(self.tenant.id, self.pages)
        self.pages = 0


class OcrService:
    """Runs documents through the CPU pool and the device workers.

    Every kind of work (`ocr`, `ocr_page_of` for jobs, `render_page` for the web page) is admitted
    the same way, bounded by its deadline, and holds the memory budget for each page it decodes:
    page sizes come from headers first, then pages are decoded one by one as the budget allows.
    """

    def __init__(
        self,
        *,
        cpu: CpuPool,
        scheduler: Scheduler,
        limits: DecodeLimits,
        admission: Admission,
        budget: MemoryBudget,
        prefix: str,
        clock: Callable[[], float] = time.monotonic,
        page_costs: Callable[[], PageCosts] = PageCosts,
        pictures: PictureLimits | None = None,
    ) -> None:
        self.cpu = cpu
        self.pictures = pictures or PictureLimits()
        """How large `visualize`'s pictures may be (`[paddlex]`)."""
        self.scheduler = scheduler
        self.limits = limits
        self.admission = admission
        self.key_pages = KeyPages()
        """Pages in flight per API key, against each key's `max_inflight_pages`."""
        self.budget = budget
        self._prefix = prefix
        self._clock = clock
        self.page_costs = page_costs
        """The page cost model now (device workers report their engines' costs when ready)."""

    async def ocr(
        self,
        data: bytes,
        kind: FileKind,
        options: OcrOptions,
        *,
        visualize: bool = False,
        timeout_s: float,
        priority: int = INTERACTIVE,
        tenant: Tenant | None = None,
    ) -> list[PageOutput]:
        """OCR every page of a document, for the API key `tenant` (None: authentication off).

        Raises:
            InvalidInput: the document does not decode or breaks a limit.
            PayloadTooLarge: a page could never fit in the memory budget.
            Overloaded: too much work in flight.
            QuotaExceeded: the key's own pages in flight are at its `max_inflight_pages`.
            DeadlineExceeded: not done within `timeout_s`.
        """
        async with self._admitted(timeout_s, tenant) as slot:
            digest = await content_digest(data)  # pages that kill workers are quarantined
            # The document crosses to the workers once, in shared memory, whatever its pages.
            source = shm.put(np.frombuffer(data, np.uint8), self._prefix)
            try:
                with self.scheduler.interactive_coming(priority), reading(PageKey(digest, -1)):
                    plans = await self.cpu.run(
                        cpu_stages.page_plans, source, kind, self.limits, None, priority=priority
                    )
                turned = options.ori is not None
                charges = [self.charge(plan, kind, options.det, turned) for plan in plans]
                slot.grow_to(len(plans))
                return await all_or_none(
                    read_as(
                        PageKey(digest, index),
                        self._document_page(
                            source, kind, index, charge, options, visualize, slot.deadline, priority
                        ),
                    )
                    for index, charge in enumerate(charges)
                )
            finally:
                shm.discard(source)

    async def ocr_page_of(
        self,
        source: bytes | str,
        kind: FileKind,
        page_index: int,
        options: OcrOptions,
        *,
        priority: int,
        timeout_s: float,
        digest: str | None = None,
    ) -> PageOutput:
        """OCR one page of a document: page `page_index` of a PDF, or an image (index 0).

        `source` is the file's bytes or its path, which the CPU worker reads (a long PDF is not
        copied for each page). Batch jobs call this once per page, at background priority, with
        the document's SHA-256 (`digest`): a page that kills workers is quarantined.

        Raises:
            InvalidInput: the page does not decode or breaks a limit.
            PayloadTooLarge: the page could never fit in the memory budget.
            Overloaded: too much work in flight.
            DeadlineExceeded: not done within `timeout_s`.
        """
        key = None if digest is None else PageKey(digest, page_index)
        async with self._admitted(timeout_s) as slot:
            with reading(key):
                (plan,) = await self.cpu.run(
                    cpu_stages.page_plans, source, kind, self.limits, page_index, priority=priority
                )
                return await self._document_page(
                    source,
                    kind,
                    page_index,
                    self.charge(plan, kind, options.det, options.ori is not None),
                    options,
                    False,
                    slot.deadline,
                    priority,
                )

    def charge(
        self, plan: PagePlan, kind: FileKind, det: DetParams, turned: bool = False
    ) -> PageCharge:
        """What a page costs the budget; a page over the whole budget is scaled down to fit half
        of it, or all of it where half is too small (`PageCosts.fit`). A page the orientation
        classifier may turn (`turned`) also holds its upright copy, a BGR page of its size.

        Raises:
            PayloadTooLarge: the page does not fit even at the smallest side it may be scaled to.
        """
        costs = self.page_costs()
        copy_per_px = TURNED_COPY_BYTES_PER_PX if turned else 0
        cost = costs.page_bytes(plan, kind, det, copy_per_px)
        sent = (plan.full_width, plan.full_height)
        if cost <= self.budget.total_bytes:
            return PageCharge(
                cost=cost,
                det_cost=costs.det_bytes(plan.width, plan.height, det),
                limits=self.limits,
                sent=sent if plan.scaled else None,
            )
        # To half the budget where it can be: one page scaled to fit leaves room for another.
        side = costs.fit(plan, kind, det, self.budget.total_bytes // 2, copy_per_px) or costs.fit(
            plan, kind, det, self.budget.total_bytes, copy_per_px
        )
        if side is None:
            self.budget.check(costs.at_side(MIN_SCALED_SIDE_PX, plan, kind, det, copy_per_px))
            raise AssertionError("unreachable: a page that fits at the smallest side has one")
        logger.info("page of %d x %d decoded at %d px a side to fit the memory budget", *sent, side)
        width, height = fit_side(plan.full_width, plan.full_height, side)
        return PageCharge(
            cost=costs.at_side(side, plan, kind, det, copy_per_px),
            det_cost=costs.det_bytes(width + 1, height + 1, det),  # as `PageCosts.at_side`
            limits=dataclasses.replace(self.limits, max_page_side_px=side),
            sent=sent,
        )

    async def render_page(
        self,
        data: bytes,
        kind: FileKind,
        page_index: int,
        *,
        timeout_s: float,
        tenant: Tenant | None = None,
    ) -> tuple[bytes, Held]:
        """Page `page_index` of a document as PNG (the web page's `/v1/render`), admitted and
        budgeted like OCR work; the PNG keeps its size of the charge until it is sent (`Held`:
        the caller releases it).

        Raises:
            InvalidInput: the page does not decode or breaks a limit.
            PayloadTooLarge: the page could never fit in the memory budget.
            Overloaded: too much work in flight.
            QuotaExceeded: the key's own pages in flight are at its `max_inflight_pages`.
            DeadlineExceeded: not done within `timeout_s`.
        """
        async with self._admitted(timeout_s, tenant):
            (plan,) = await self.cpu.run(cpu_stages.page_plans, data, kind, self.limits, page_index)
            # The decoded page and its PNG encoding, on top of the decode buffer (an image is
            # decoded as sent before it is downscaled).
            sent = plan.full_width * plan.full_height
            cost = 10 * (sent if kind == "image" else plan.width * plan.height)
            async with self.budget.hold(cost) as held:
                png: bytes = await self.cpu.run(
                    page_png, data, kind, page_index, self.limits, holding=held
                )
                # Before, the PNG (~48 MB for a 4000 x 4000 page of noise) was answered
                # uncharged.
                return png, await self.budget.answer_from(held.take(), len(png))

    def _pool_deadline(self, deadline: float) -> float:
        """`deadline` (this service's clock) on the CPU pool's (`time.monotonic`): a worker
        killed for outliving it counts against its page (`serving.workers.quarantine`)."""
        return time.monotonic() + (deadline - self._clock())

    @contextlib.asynccontextmanager
    async def _admitted(
        self, timeout_s: float, tenant: Tenant | None = None
    ) -> AsyncIterator[_Slot]:
        """Admit one page (more with `grow_to`) for the work inside, bounded by `timeout_s`,
        counted for the API key `tenant` too (job pages run for none: the runner bounds them)."""
        slot = _Slot(
            admission=self.admission,
            key_pages=self.key_pages,
            tenant=tenant,
            deadline=self._clock() + timeout_s,
            clock=self._clock,
        )
        with tracing.span("admission"):
            slot.grow_to(1)
        try:
            async with asyncio.timeout(timeout_s):
                yield slot
        except TimeoutError as err:
            raise DeadlineExceeded() from err
        finally:
            slot.release()

    async def _document_page(
        self,
        source: shm.ShmRef | bytes | str,
        kind: FileKind,
        index: int,
        charge: PageCharge,
        options: OcrOptions,
        visualize: bool,
        deadline: float,
        priority: int,
    ) -> PageOutput:
        """Decode one page once the budget has room for it, and OCR it; the room is held until
        its result is assembled, but for what its detection held, given back once that is done
        (pages waiting on recognition then leave room for others' detection)."""
        _SET_STAGES.set(options.stages)  # this page's model set: the queues `_infer` submits to
        with tracing.span("page", {"ocr.page": index}):
            return await self._budgeted_page(
                source, kind, index, charge, options, visualize, deadline, priority
            )

    async def _budgeted_page(
        self,
        source: shm.ShmRef | bytes | str,
        kind: FileKind,
        index: int,
        charge: PageCharge,
        options: OcrOptions,
        visualize: bool,
        deadline: float,
        priority: int,
    ) -> PageOutput:
        held = charge.cost
        with tracing.span("memory_budget.wait"):
            await self.budget.acquire(held)

        def detection_done() -> None:
            nonlocal held
            if held == charge.cost:
                held -= charge.det_cost
                self.budget.release(charge.det_cost)

        try:
            with self.scheduler.interactive_coming(priority):
                page = await self.cpu.run(
                    cpu_stages.prepare_page_of,
                    source,
                    kind,
                    index,
                    charge.limits,
                    options.det,
                    options.ori,
                    priority=priority,
                    deadline=self._pool_deadline(deadline),
                )
            try:
                output = await self._page(
                    page, options, visualize, deadline, priority, detection_done
                )
            finally:
                free_segments(page)
        finally:
            self.budget.release(held)
        self.admission.page_done()
        output.scaled_from = charge.sent
        return output

    async def _page(
        self,
        page: cpu_stages.PreparedPage,
        options: OcrOptions,
        visualize: bool,
        deadline: float,
        priority: int,
        detection_done: Callable[[], None],
    ) -> PageOutput:
        """The page pipeline's steps (`pipelines.page`) in the CPU pool, each after the inference
        its state awaits; `detection_done()` once the detector's input and map are freed. A page
        the orientation classifier turned is read from its upright copy, freed at the end."""
        step = page.step
        upright: shm.ShmRef | None = None
        try:
            if step.state.awaiting == "ori" and options.ori is not None:
                oriented = await self._infer_then(
                    step,
                    deadline,
                    priority,
                    cpu_stages.after_ori,
                    page.image,
                    options.det,
                    options.ori,
                )
                upright, step = oriented.upright, oriented.step
            step = await self._infer_then(
                step,
                deadline,
                priority,
                cpu_stages.after_det,
                upright or page.image,
                options.det,
                options.rec,
                options.cls,
            )
            detection_done()
            if step.state.awaiting == "cls":
                step = await self._infer_then(
                    step, deadline, priority, cpu_stages.after_cls, options.rec
                )
            result, images = await self._infer_then(
                step,
                deadline,
                priority,
                cpu_stages.finish,
                page.image,  # pictures are drawn on the page as sent, as the boxes are
                options.rec,
                self.pictures if visualize else None,
                options.model_set,
                last=True,
            )
        finally:
            if upright is not None:
                shm.discard(upright)
        return PageOutput(result=result, images=images)

    async def _infer_then(
        self,
        step: cpu_stages.SharedStep,
        deadline: float,
        priority: int,
        cpu_step: Callable[..., T],
        *args: Any,
        last: bool = False,
    ) -> T:
        """Run the inference `step` awaits, then `cpu_step(step, outputs, *args)` in the pool; the
        step's segments and the outputs' are freed whatever happens."""
        try:
            # Names the page among the items of this stage (the metric of pages a batch).
            page = step.inputs[0].name if step.inputs else None
            # Largest first: a lone page's chunks, spread over the free workers, then end
            # together rather than behind its widest chunk, queued last (PaddleOCR orders
            # them narrowest first). Submission order is the queue's order among equals.
            order = sorted(
                range(len(step.inputs)),
                key=lambda i: math.prod(step.inputs[i].shape),
                reverse=True,
            )
            answers = await all_or_none(
                self._infer(step.state.awaiting, step.inputs[i], deadline, priority, page)
                for i in order
            )
            outputs: list[Any] = [None] * len(order)
            for i, answer in zip(order, answers, strict=True):
                outputs[i] = answer
            try:
                # Every step but the last submits the page's next stage.
                with self.scheduler.interactive_coming(BACKGROUND if last else priority):
                    return await self.cpu.run(
                        cpu_step,
                        step,
                        outputs,
                        *args,
                        priority=priority,
                        deadline=self._pool_deadline(deadline),
                    )
            finally:
                free_segments(outputs)
        finally:
            free_segments(step)

    async def _infer(
        self, stage: str, payload: shm.ShmRef, deadline: float, priority: int, page: str | None
    ) -> Any:
        rows, _, height, width = payload.shape
        kind, stage = stage, _SET_STAGES.get().get(stage, stage)
        bucket: Any
        if kind == "det":  # pages of one size, charged by pixels
            bucket, cost = (height, width), rows * height * width
        elif stage == "ori":  # pages, each 224 x 224: charged by rows, as chunks by width
            bucket, cost = (height, width), rows * width
        else:  # chunks of crops padded to one width, charged by width x rows
            bucket, cost = width, rows * width
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        item = WorkItem(
            stage=stage,
            bucket=bucket,
            payload=payload,
            count=rows,
            cost=cost,
            priority=priority,
            deadline=deadline,
            future=future,
            page=page,
            trace=tracing.current(),
        )
        self.scheduler.submit(item)
        try:
            return await future
        except asyncio.CancelledError:
            future.cancel()
            raise


async def all_or_none(coros: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Every result, in order; when one fails, the others are cancelled and awaited before the
    error propagates (a plain `gather` leaves them running on a document already freed)."""
    tasks = [asyncio.ensure_future(coro) for coro in coros]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
