"""Simulated clients: open-loop arrivals, closed-loop clients, and the background job feed."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadtest.sim.events import EventLoop
from loadtest.sim.flow import JOB_MAX_ATTEMPTS, JOB_RETRY_BACKOFF_S, RequestFlow, SimRequest
from loadtest.sim.stats import Recorder
from loadtest.sim.traffic import PageSpec, TrafficSource
from serving.scheduling.priorities import BACKGROUND, INTERACTIVE


@dataclass(slots=True, eq=False)
class InteractiveClients:
    """Interactive `/v1/ocr` requests until `stop_s`: Poisson (with bursts) or closed loop."""

    loop: EventLoop
    flow: RequestFlow
    source: TrafficSource
    recorder: Recorder
    stop_s: float

    def start(self) -> None:
        """Schedule the first arrivals."""
        config = self.source.config
        if config.concurrency > 0:
            for _ in range(config.concurrency):
                self.loop.soon(self._send_closed)
        first = self.source.next_arrival(0.0)
        if first is not None and first < self.stop_s:
            self.loop.at(first, self._arrive)

    def _arrive(self, _: object) -> None:
        self._send()
        following = self.source.next_arrival(self.loop.now)
        if following is not None and following < self.stop_s:
            self.loop.at(following, self._arrive)

    def _send_closed(self, _: object) -> None:
        if self.loop.now < self.stop_s:
            self._send(closed=True)

    def _send(self, *, closed: bool = False) -> None:
        self.recorder.arrival(self.loop.now)
        draw = self.source.next_request()
        self.flow.start(
            draw,
            INTERACTIVE,
            cancel_after_s=draw.cancel_after_s,
            on_end=self._answered if closed else None,
        )

    def _answered(self, request: SimRequest) -> None:
        config = self.source.config
        wait = config.retry_after_s if request.status == "shed" else config.client_gap_s
        self.loop.at(self.loop.now + wait, self._send_closed)


@dataclass(slots=True, eq=False)
class _JobPage:
    spec: PageSpec
    attempts: int = 0


@dataclass(slots=True, eq=False)
class JobFeedSim:
    """`serving.jobs.runner.JobRunner._feed`: up to `max_inflight` job pages at once, each its
    own request at BACKGROUND priority; 503 at admission: the page goes back after 1 s; 503 or
    504 later: tried again up to 4 times, after 1, 2, 4 s."""

    loop: EventLoop
    flow: RequestFlow
    source: TrafficSource
    stop_s: float
    max_inflight: int
    backlog: int
    """Pages not yet started; -1: endless."""
    timeout_s: float
    """`jobs.page_timeout_s`."""
    inflight: int = 0
    pages_done: int = 0
    pages_failed: int = 0
    _retry: list[_JobPage] = field(default_factory=list)
    _running: dict[int, _JobPage] = field(default_factory=dict)

    def start(self) -> None:
        """Start feeding."""
        self.loop.soon(self._feed)

    def _feed(self, _: object = None) -> None:
        while self.inflight < self.max_inflight and self.loop.now < self.stop_s:
            if self._retry:
                page = self._retry.pop(0)
            elif self.backlog != 0:
                if self.backlog > 0:
                    self.backlog -= 1
                page = _JobPage(self.source.page())
            else:
                return
            self.inflight += 1
            page.attempts += 1
            request = self.flow.start(
                [page.spec], BACKGROUND, on_end=self._ended, timeout_s=self.timeout_s
            )
            if request.status is None:
                self._running[id(request)] = page
            else:  # shed at once: `_ended` already ran without the page
                self._after(page, "shed")

    def _ended(self, request: SimRequest) -> None:
        page = self._running.pop(id(request), None)
        if page is not None and request.status is not None:
            self._after(page, request.status)

    def _after(self, page: _JobPage, outcome: str) -> None:
        if outcome == "ok":
            self.pages_done += 1
            self._release(None)
            return
        if outcome == "shed":
            page.attempts -= 1  # refunded: the attempt does not count
            self.loop.at(self.loop.now + JOB_RETRY_BACKOFF_S, self._release, page)
            return
        if page.attempts < JOB_MAX_ATTEMPTS:
            wait = JOB_RETRY_BACKOFF_S * 2 ** (page.attempts - 1)
            self.loop.at(self.loop.now + wait, self._release, page)
            return
        self.pages_failed += 1
        self._release(None)

    def _release(self, page: _JobPage | None) -> None:
        self.inflight -= 1
        if page is not None:
            self._retry.append(page)
        self._feed()
