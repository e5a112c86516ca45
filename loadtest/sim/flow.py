"""A request's path through the simulated server, as `serving.service.ocr.OcrService` takes it.

Admission (`Admission.admit`, 503 when shed) -> CPU `page_sizes` -> `grow_to` the request's
pages (503 when shed) -> per page: CPU `prepare_page_of` -> det item -> CPU `after_det` -> one rec
item per chunk -> CPU `finish` -> `page_done`. A request ends answered, at its deadline (504), when
its client goes away, or shed; then its queued items are abandoned (the policy drops them) and
its CPU calls skipped, as when the server cancels the request's task. Background job pages take
the same path at BACKGROUND priority, one page per request, fed by `JobFeedSim` as
`serving.jobs.runner` feeds them (`jobs.max_inflight_pages`, retries after 503 and 504).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadtest.sim.cpu import CpuPoolSim
from loadtest.sim.devices import DeviceDispatch
from loadtest.sim.events import EventLoop
from loadtest.sim.stats import Recorder
from loadtest.sim.traffic import PageSpec, RequestDraw
from serving.errors import Overloaded
from serving.jobs.runner import MAX_ATTEMPTS, RETRY_BACKOFF_S
from serving.scheduling.admission import Admission
from serving.scheduling.batching import BatchPolicy, WorkItem
from serving.scheduling.priorities import BACKGROUND

JOB_RETRY_BACKOFF_S = RETRY_BACKOFF_S
JOB_MAX_ATTEMPTS = MAX_ATTEMPTS


class SimRequest:
    """One request (or one attempt at a job page) in flight."""

    __slots__ = (
        "arrival",
        "coming",
        "deadline",
        "items",
        "on_end",
        "pages",
        "pages_held",
        "pages_left",
        "priority",
        "status",
    )

    def __init__(
        self,
        pages: list[PageSpec] | RequestDraw,
        priority: int,
        arrival: float,
        deadline: float,
        on_end: Callable[[SimRequest], None] | None,
    ) -> None:
        self.pages = pages
        """The pages, or the draw they come from once the request is admitted."""
        self.priority = priority
        self.arrival = arrival
        self.deadline = deadline
        self.on_end = on_end
        self.pages_left = pages.pages if isinstance(pages, RequestDraw) else len(pages)
        self.pages_held = 0
        self.coming = 0
        """Its interactive CPU steps in flight that end by submitting device work."""
        self.items: list[WorkItem] = []
        self.status: str | None = None
        """None while in flight; then one of `stats.OUTCOMES`."""

    @property
    def kind(self) -> str:
        """Interactive or background."""
        return "background" if self.priority == BACKGROUND else "interactive"


class SimPage:
    """One page of a request, waiting for its recognition chunks."""

    __slots__ = ("chunks_left", "request", "spec")

    def __init__(self, request: SimRequest, spec: PageSpec) -> None:
        self.request = request
        self.spec = spec
        self.chunks_left = 0


@dataclass(slots=True, eq=False)
class RequestFlow:
    """Moves requests through admission, the CPU pool and the policy's queues."""

    loop: EventLoop
    futures: asyncio.AbstractEventLoop
    """A private event loop that is never run: it only makes the items' futures."""
    cpu: CpuPoolSim
    policy: BatchPolicy
    admission: Admission
    recorder: Recorder
    timeout_s: float
    draw_pages: Callable[[RequestDraw], list[PageSpec]]
    """The pages of a drawn request, made once it is admitted (most of a shed request's cost would
    be drawing pages nobody looks at)."""
    dispatch: DeviceDispatch | None = None
    ended: int = 0
    coming: int = 0
    """Interactive CPU steps in flight that end by submitting device work, as
    `Scheduler.interactive_coming` counts them: while any runs, devices leave background work."""

    def start(
        self,
        pages: list[PageSpec] | RequestDraw,
        priority: int,
        *,
        cancel_after_s: float | None = None,
        on_end: Callable[[SimRequest], None] | None = None,
        timeout_s: float | None = None,
    ) -> SimRequest:
        """A request arrives now; its deadline is `timeout_s` (default: the flow's) from now."""
        now = self.loop.now
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        request = SimRequest(pages, priority, now, now + timeout_s, on_end)
        try:
            self.admission.admit(1, deadline_s=timeout_s)
        except Overloaded:
            self._end(request, "shed")
            return request
        request.pages_held = 1
        self.loop.at(request.deadline, self._deadline, request)
        if cancel_after_s is not None:
            self.loop.at(now + cancel_after_s, self._cancel, request)
        seconds = self.cpu.model.sizes.seconds(0, 0)
        self._then_device(request, seconds, self._sized, request)
        return request

    def _sized(self, request: SimRequest) -> None:
        if isinstance(request.pages, RequestDraw):
            request.pages = self.draw_pages(request.pages)
        if request.priority != BACKGROUND:  # `ocr` grows the slot; `ocr_page_of` holds one page
            wanted = len(request.pages)
            try:
                self.admission.admit(
                    wanted - request.pages_held,
                    deadline_s=request.deadline - self.loop.now,
                    held=request.pages_held,
                )
            except Overloaded:
                self._end(request, "shed")
                return
            request.pages_held = wanted
        model = self.cpu.model
        for spec in request.pages:
            page = SimPage(request, spec)
            seconds = model.prepare.seconds(spec.det_pixels, spec.lines)
            self._then_device(request, seconds, self._prepared, page)

    def _prepared(self, page: SimPage) -> None:
        spec = page.spec
        self._submit(page, "det", (spec.det_h, spec.det_w), 1, spec.det_pixels)

    def _submit(self, page: SimPage, stage: str, bucket: object, rows: int, cost: int) -> bool:
        request = page.request
        item = WorkItem(
            stage=stage,
            bucket=bucket,
            payload=page,
            count=rows,
            cost=cost,
            priority=request.priority,
            deadline=request.deadline,
            future=self.futures.create_future(),
        )
        try:
            self.policy.submit(item, self.loop.now)
        except Overloaded:
            self._end(request, "shed")
            return False
        request.items.append(item)
        if self.dispatch is not None:
            self.dispatch.changed()
        return True

    def item_done(self, item: WorkItem) -> None:
        """A device answered `item`."""
        page: SimPage = item.payload
        request = page.request
        if request.status is not None:
            return
        spec = page.spec
        model = self.cpu.model
        if item.stage == "det":
            seconds = model.after_det.seconds(spec.det_pixels, spec.lines)
            self._then_device(request, seconds, self._detected, page)
            return
        page.chunks_left -= 1
        if page.chunks_left == 0:
            seconds = model.finish.seconds(spec.det_pixels, spec.lines)
            self.cpu.run(request, seconds, request.priority, self._finished, page)

    def item_dropped(self, item: WorkItem) -> None:
        """The policy dropped `item` while it was still awaited: past its deadline (504)."""
        page: SimPage = item.payload
        self._end(page.request, "deadline")

    def _detected(self, page: SimPage) -> None:
        page.chunks_left = len(page.spec.chunks)
        for rows, width in page.spec.chunks:
            if not self._submit(page, "rec", width, rows, rows * width):
                return

    def _finished(self, page: SimPage) -> None:
        request = page.request
        self.admission.page_done()
        request.pages_left -= 1
        if request.pages_left == 0:
            self._end(request, "ok")

    def _deadline(self, request: SimRequest) -> None:
        self._end(request, "deadline")

    def _cancel(self, request: SimRequest) -> None:
        self._end(request, "cancelled")

    def _then_device(
        self, request: SimRequest, seconds: float, done: Callable[[Any], None], arg: Any
    ) -> None:
        """A CPU step whose `done` submits device work (as `OcrService` wraps those steps)."""
        if request.priority == BACKGROUND:
            self.cpu.run(request, seconds, request.priority, done, arg)
            return
        request.coming += 1
        self.coming += 1
        self.cpu.run(request, seconds, request.priority, self._came, (request, done, arg))

    def _came(self, call: tuple[SimRequest, Callable[[Any], None], Any]) -> None:
        request, done, arg = call
        self._release(request, 1)
        done(arg)

    def _release(self, request: SimRequest, steps: int) -> None:
        request.coming -= steps
        self.coming -= steps
        if not self.coming and self.dispatch is not None:
            self.dispatch.changed()

    def _end(self, request: SimRequest, outcome: str) -> None:
        if request.status is not None:
            return
        request.status = outcome
        if request.coming:  # its steps' `done` will not run
            self._release(request, request.coming)
        self.ended += 1
        if request.pages_held:
            self.admission.release(request.pages_held)
        for item in request.items:
            if not item.future.done():
                item.future.cancel()
        request.items = []
        pages = len(request.pages) if isinstance(request.pages, list) else request.pages.pages
        self.recorder.request_ended(request.kind, outcome, request.arrival, self.loop.now, pages)
        if request.on_end is not None:
            request.on_end(request)
