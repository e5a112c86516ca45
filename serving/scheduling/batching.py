"""Batching policy: which queued items run together on which device, and when. No Paddle here.

Items wait in per-stage queues, grouped by shape bucket (det: padded H x W; rec and cls: padded
width), so a batch never mixes shapes and never pads across requests. A free device worker asks for
the next batch sized for it (work pulling): the policy picks the most urgent bucket among the stages
the worker serves (priority first, then later pipeline stages first so requests in flight finish,
then age), fills the batch up to the worker's count and cost caps, and waits up to `max_wait_ms` for
company when the batch is not full. Among unlike devices a worker leaves a batch that another
device would finish sooner (`serving.scheduling.placement`). Background work that has had less
than its share of the devices goes first (`serving.scheduling.share`). Expired and cancelled
items are dropped, never run. When the server stops, `Scheduler.close` fails every item still
awaited, queued or running, with a 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from serving.config import QueueConfig, StageLimits
from serving.errors import DeadlineExceeded, OcrError, Overloaded, ShuttingDown
from serving.scheduling.placement import Placement
from serving.scheduling.priorities import BACKGROUND
from serving.scheduling.share import BackgroundShare

# Later stages first: finishing requests already in flight bounds latency and memory.
STAGE_RANK = {"rec": 0, "cls": 1, "det": 2, "ori": 3}


@dataclass(slots=True, eq=False)
class WorkItem:
    """One unit of inference work: a page for det, a padded chunk of crops for rec and cls."""

    stage: str
    bucket: Hashable
    payload: Any
    count: int
    """Rows this item adds to the predictor batch."""
    cost: int
    """Pixels for det; padded width x rows for rec and cls."""
    priority: int
    deadline: float
    """time.monotonic() value after which the item is dropped."""
    future: asyncio.Future[Any]
    enqueued_at: float = 0.0
    attempts: int = 0
    """How many times a device worker died while holding this item."""
    page: Hashable = None
    """The page the item is part of (any key unique to it), for the pages-a-batch metric;
    None where unknown."""
    trace: Any = None
    """The submitter's trace context (`serving.tracing.current`), that its wait in the queue
    and its batch are traced in; None while tracing is off."""

    @property
    def abandoned(self) -> bool:
        """The requester no longer waits for this item (cancelled, or already failed)."""
        return self.future.done()

    @property
    def sort_key(self) -> tuple[int, int, float]:
        """Urgency: lower runs first."""
        # A model set's own stage ("rec@PP-OCRv6_small", `serving.model_sets`) ranks as its kind.
        return (self.priority, STAGE_RANK[self.stage.partition("@")[0]], self.enqueued_at)


@dataclass(slots=True)
class Selection:
    """What `BatchPolicy.select` decided."""

    batch: list[WorkItem] = field(default_factory=list)
    """Items to run now, all of one stage and bucket; empty when nothing is ready."""
    wake_at: float | None = None
    """When a waiting bucket reaches its max wait; None when nothing is queued."""
    dropped: list[WorkItem] = field(default_factory=list)
    """Expired or abandoned items: failed with DeadlineExceeded if still awaited, then freed."""


class Candidate(NamedTuple):
    """A bucket with work for the asking worker, as `BatchPolicy.select` considers it."""

    sort_key: tuple[int, int, float]
    """`WorkItem.sort_key` of its most urgent item (of the class considered)."""
    stage: str
    bucket: Hashable

    @property
    def priority(self) -> int:
        """The class it is considered for: its most urgent item's priority."""
        return self.sort_key[0]

    @property
    def background(self) -> bool:
        """Whether it is considered for background work."""
        return self.priority >= BACKGROUND


class Where(NamedTuple):
    """The device asking for work, and the placement state it decides on."""

    device: str
    placement: Placement
    free: Mapping[str, float]
    """`Placement.free_times` at `now`."""
    now: float


class BatchPolicy:
    """Pure batching policy over per-stage queues; time is passed in, so tests use a fake clock."""

    def __init__(self, queues: Mapping[str, QueueConfig], *, background_share: float = 0.0) -> None:
        self._config = dict(queues)
        self._buckets: dict[str, dict[Hashable, list[WorkItem]]] = {s: {} for s in queues}
        self._sizes: dict[str, int] = dict.fromkeys(queues, 0)
        self.share = BackgroundShare(background_share)
        """Device seconds handed to background work; below `background_share` of them it goes
        first (`jobs.min_share`; 0: strict priority)."""

    def depth(self, stage: str) -> int:
        """Items queued for `stage` (including abandoned ones not yet swept)."""
        return self._sizes[stage]

    def has_room(self, stage: str, items: int = 1) -> bool:
        """Whether `items` more fit under the stage's `max_queue_len`."""
        return self._sizes[stage] + items <= self._config[stage].max_queue_len

    def submit(self, item: WorkItem, now: float, *, front: bool = False) -> None:
        """Queue `item`; `front` keeps its original age (a retry after a worker died).

        Raises:
            Overloaded: the stage's queue is full.
        """
        if not front:
            if not self.has_room(item.stage):
                raise Overloaded(f"The {item.stage} queue is full")
            item.enqueued_at = now
        self._buckets[item.stage].setdefault(item.bucket, []).append(item)
        self._sizes[item.stage] += 1

    def select(
        self,
        now: float,
        stages: Iterable[str],
        limits: Mapping[str, StageLimits],
        *,
        company_possible: bool = True,
        device: str | None = None,
        placement: Placement | None = None,
        hold_background: bool = False,
    ) -> Selection:
        """Pick the next batch for a worker serving `stages` with batch caps `limits`.

        A bucket that is not full waits up to its stage's `max_wait_ms`, but only while
        `company_possible` (other work in flight could still join it), and never while other
        buckets are ready: the worker runs those meanwhile. With a `placement`, the worker
        (`device`) leaves a batch that another device would finish sooner and takes the next
        candidate instead. With `hold_background` (interactive work is about to be submitted:
        a page in a CPU step between its device stages), long background batches wait: a job's
        batch, once started, is not preempted, and the interactive page would wait for all of it.
        An interactive batch takes background items of its bucket only if it stays short
        (`LONG_BATCH_S`). While background work has had less than its share of the devices
        (`self.share`), background candidates come first, `hold_background` or not.
        """
        selection = Selection()
        candidates, background_first = self._candidates(now, stages, selection.dropped)
        hold = hold_background and not background_first
        where = None
        if placement is not None and device is not None:
            where = Where(device, placement, placement.free_times(now), now)
        left: dict[str, int] = {}  # cost of each stage's batches left to others: their queue
        for candidate in candidates:
            stage_limits = limits[candidate.stage]
            formed = self._form(candidate, stage_limits, device, placement, hold=hold)
            if formed is None:
                continue  # a release (`Scheduler.interactive_coming`) notifies the workers
            batch, full = formed
            ready_at = self._ready_at(candidate.stage, batch)
            if not (full or now >= ready_at or not company_possible):  # waits for company
                selection.wake_at = _earliest(selection.wake_at, ready_at)
                continue
            if where is not None:
                left_cost = left.get(candidate.stage, 0)
                placed = self._place(candidate, batch, left_cost, stage_limits, where)
                if isinstance(placed, float):
                    left[candidate.stage] = left_cost + sum(it.cost for it in batch)
                    # The other device takes it, or frees (a notify) before then: waking at
                    # a time already past would only spin.
                    if placed > now:
                        selection.wake_at = _earliest(selection.wake_at, placed)
                    continue
                batch = placed
            self._take(candidate.stage, candidate.bucket, batch)
            self._account(batch, device, placement, now)
            selection.batch = batch
            return selection
        return selection

    def _candidates(
        self, now: float, stages: Iterable[str], dropped: list[WorkItem]
    ) -> tuple[list[Candidate], bool]:
        """Each bucket's candidate, most urgent first, after sweeping expired and abandoned items
        into `dropped`; and whether background work goes first (its share is due and both
        classes wait). Then the background candidates, those of buckets interactive items lead
        too, come before every interactive one, in their order."""
        due = self.share.due(now)
        candidates: list[Candidate] = []
        # Background heads of buckets an interactive item leads (only looked for when due).
        behind: list[Candidate] = []
        for stage in stages:
            buckets = self._buckets.get(stage)
            if not buckets:
                continue
            for bucket in list(buckets):
                items = self._sweep(stage, bucket, now, dropped)
                if not items:
                    continue
                head = min(items, key=lambda it: it.sort_key)
                candidates.append(Candidate(head.sort_key, stage, bucket))
                if due and head.priority < BACKGROUND:
                    keys = [it.sort_key for it in items if it.priority >= BACKGROUND]
                    if keys:
                        behind.append(Candidate(min(keys), stage, bucket))
        candidates.sort(key=lambda c: c.sort_key)
        interactive_waits = bool(candidates) and not candidates[0].background
        background_waits = bool(behind) or (bool(candidates) and candidates[-1].background)
        if not (due and interactive_waits and background_waits):
            return candidates, False
        background = sorted(
            [c for c in candidates if c.background] + behind, key=lambda c: c.sort_key
        )
        return background + [c for c in candidates if not c.background], True

    def _form(
        self,
        candidate: Candidate,
        limits: StageLimits,
        device: str | None,
        placement: Placement | None,
        *,
        hold: bool,
    ) -> tuple[list[WorkItem], bool] | None:
        """The candidate's most urgent batch of its class, and whether it is full; None while a
        long background batch is `hold`-ed for interactive work about to come."""
        items = self._buckets[candidate.stage][candidate.bucket]
        batch, full = self._fill(items, limits, only=candidate.priority)
        if candidate.background:
            # Of a bucket interactive items lead, only when background work goes first.
            if hold and _long(batch, device, placement):
                return None
            return batch, full
        # Background items ride along only where they add little time (a GPU's batch).
        if _long(batch, device, placement):
            return batch, full
        return self._fill(items, limits)

    def _ready_at(self, stage: str, batch: list[WorkItem]) -> float:
        """When a batch that is not full stops waiting for company: its oldest item's max wait."""
        oldest = min(it.enqueued_at for it in batch)
        return oldest + self._config[stage].max_wait_ms / 1000.0

    def _place(
        self,
        candidate: Candidate,
        head: list[WorkItem],
        left: int,
        limits: StageLimits,
        where: Where,
    ) -> list[WorkItem] | float:
        """The batch `where.device` should take from the candidate's bucket, or when to look again.

        The most urgent items (`head`), unless another device would finish them sooner (after
        the work, of cost `left`, already left to it). Then the least urgent ones, which another
        device reaches only after all the rest of the bucket: a slow device helps with a backlog
        from its tail, never delaying the head.
        """
        stage = candidate.stage
        device, placement, free, now = where
        cost = sum(it.cost for it in head)
        look_again = placement.leave_until(device, stage, cost, now, left, free=free)
        if look_again is None:
            return head
        items = self._buckets[stage][candidate.bucket]
        tail, _ = self._fill(items, limits, least_urgent=True)
        tail_cost = sum(it.cost for it in tail)
        ahead = sum(it.cost for it in items) - tail_cost
        if ahead > 0 and (
            placement.leave_until(device, stage, tail_cost, now, left + ahead, free=free) is None
        ):
            return tail
        return look_again

    def drain(self) -> list[WorkItem]:
        """Remove and return every queued item (shutdown)."""
        items = [it for buckets in self._buckets.values() for b in buckets.values() for it in b]
        for stage in self._buckets:
            self._buckets[stage] = {}
            self._sizes[stage] = 0
        return items

    def _sweep(
        self, stage: str, bucket: Hashable, now: float, dropped: list[WorkItem]
    ) -> list[WorkItem]:
        items = self._buckets[stage][bucket]
        keep = []
        for item in items:
            if item.abandoned or now >= item.deadline:
                dropped.append(item)
                continue
            keep.append(item)
        self._sizes[stage] -= len(items) - len(keep)
        if keep:
            self._buckets[stage][bucket] = keep
        else:
            del self._buckets[stage][bucket]
        return keep

    @staticmethod
    def _fill(
        items: list[WorkItem],
        limits: StageLimits,
        *,
        least_urgent: bool = False,
        only: int | None = None,
    ) -> tuple[list[WorkItem], bool]:
        """Most (or least) urgent items (of priority `only`) that fit the caps; the first one
        always fits (it runs alone)."""
        batch: list[WorkItem] = []
        count = cost = 0
        ordered = sorted(items, key=lambda it: it.sort_key, reverse=least_urgent)
        if only is not None:
            ordered = [it for it in ordered if it.priority == only]
        for item in ordered:
            fits = (
                count + item.count <= limits.max_batch_size and cost + item.cost <= limits.max_cost
            )
            if batch and not fits:
                return batch, True
            batch.append(item)
            count += item.count
            cost += item.cost
        full = count >= limits.max_batch_size or cost >= limits.max_cost
        return batch, full

    def _account(
        self, batch: list[WorkItem], device: str | None, placement: Placement | None, now: float
    ) -> None:
        """Count the batch's predicted device seconds to each class (none before the device has
        run its stage: the share is of measured time)."""
        if self.share.min_share <= 0 or placement is None or device is None:
            return
        cost = sum(it.cost for it in batch)
        seconds = placement.model.predict(device, batch[0].stage, cost)
        if seconds is None:
            return
        background = sum(it.cost for it in batch if it.priority >= BACKGROUND)
        self.share.record(now, seconds, seconds * background / max(cost, 1))

    def _take(self, stage: str, bucket: Hashable, batch: list[WorkItem]) -> None:
        taken = {id(it) for it in batch}
        rest = [it for it in self._buckets[stage][bucket] if id(it) not in taken]
        if rest:
            self._buckets[stage][bucket] = rest
        else:
            del self._buckets[stage][bucket]
        self._sizes[stage] -= len(batch)


LONG_BATCH_S = 0.2
"""A batch predicted to take longer than this is long: while interactive work is coming, no
background batch that long starts (it would not be preempted), and no background item makes an
interactive batch that long longer. On this machine's CPU device every batch is long (a page's
det 0.8 s, a 6-crop rec chunk 0.1-1.2 s); on a GPU, batches are short and mixing them is cheap."""


def _long(batch: list[WorkItem], device: str | None, placement: Placement | None) -> bool:
    """Whether `batch` is long on `device`; so is any batch on a device not yet measured."""
    if placement is None or device is None:
        return True
    predicted = placement.model.predict(device, batch[0].stage, sum(it.cost for it in batch))
    return predicted is None or predicted > LONG_BATCH_S


def _earliest(current: float | None, candidate: float) -> float:
    return candidate if current is None else min(current, candidate)


class Scheduler:
    """The event-driven side of the policy: workers await batches; submits wake them."""

    def __init__(
        self,
        queues: Mapping[str, QueueConfig],
        *,
        clock: Callable[[], float] = time.monotonic,
        on_drop: Callable[[WorkItem], None] | None = None,
        company_possible: Callable[[], bool] = lambda: True,
        placement: Placement | None = None,
        background_share: float = 0.0,
    ) -> None:
        self.policy = BatchPolicy(queues, background_share=background_share)
        self.placement = placement or Placement()
        self._clock = clock
        self._changed = asyncio.Event()
        self._on_drop = on_drop
        self._company_possible = company_possible
        self._open: set[WorkItem] = set()
        """Items submitted and not yet answered: queued, or in a batch on a device."""
        self._closed = False
        self._coming = 0
        """Interactive CPU steps in flight that end by submitting device work."""

    @property
    def closed(self) -> bool:
        """`close()` was called: the server is stopping."""
        return self._closed

    def company_possible(self) -> bool:
        """Whether other pages than one are in flight (admitted and not done, in a queue, on a
        device or in a CPU step), whose work could join a batch or come to a device soon."""
        return self._company_possible()

    def submit(self, item: WorkItem, *, front: bool = False) -> None:
        """Queue an item and wake the waiting workers.

        Raises:
            Overloaded: the stage's queue is full.
            ShuttingDown: the scheduler is closed.
        """
        if self._closed:
            raise ShuttingDown()
        self.policy.submit(item, self._clock(), front=front)
        if item not in self._open:  # a retry (`front`) is already tracked
            self._open.add(item)
            item.future.add_done_callback(lambda _: self._open.discard(item))
        self._changed.set()

    def close(self) -> int:
        """Shutdown: fail every item still awaited with ShuttingDown (503), whether queued or in a
        batch on a device, and refuse new ones, so that requests answer before the grace runs out.

        Queued items are removed and freed; a running batch's outcome is freed when it comes back.
        Returns how many items were failed.
        """
        self._closed = True
        failed = 0
        for item in self.policy.drain():
            failed += not item.future.done()
            self._drop(item, ShuttingDown())
        for item in list(self._open):
            if not item.future.done():
                item.future.set_exception(ShuttingDown())
                failed += 1
        self._open.clear()
        return failed

    def background_share(self) -> float:
        """Background batches' share of the device seconds handed out lately (`jobs.min_share`)."""
        return self.policy.share.fraction(self._clock())

    def notify(self) -> None:
        """Something other than a submit changed what workers may take (a device freed)."""
        self._changed.set()

    @contextlib.contextmanager
    def interactive_coming(self, priority: int) -> Iterator[None]:
        """Around a CPU step that ends by submitting device work at `priority`: while an
        interactive one runs, workers leave background batches (`BatchPolicy.select`'s
        `hold_background`), so the page's next stage does not queue behind a job's batch."""
        if priority >= BACKGROUND:
            yield
            return
        self._coming += 1
        try:
            yield
        finally:
            self._coming -= 1
            if not self._coming:
                self._changed.set()

    async def next_batch(
        self, stages: Iterable[str], limits: Mapping[str, StageLimits], device: str | None = None
    ) -> list[WorkItem]:
        """Wait for the next batch sized for a worker (`device`, its unique name, for placement
        among unlike devices); never polls."""
        stages = tuple(stages)
        while True:
            self._changed.clear()
            selection = self.policy.select(
                self._clock(),
                stages,
                limits,
                company_possible=self._company_possible(),
                device=device,
                placement=self.placement,
                hold_background=self._coming > 0,
            )
            for item in selection.dropped:
                self._drop(item)
            if selection.batch:
                # Other workers may find work in what is left.
                self._changed.set()
                return selection.batch
            timeout = None
            if selection.wake_at is not None:
                timeout = max(0.0, selection.wake_at - self._clock())
            with contextlib.suppress(TimeoutError):
                # Not wait_for: on Python 3.11 it can swallow a cancel that meets the event's set (a
                # test's outbox.stop() waited on a loop that went on).
                async with asyncio.timeout(timeout):
                    await self._changed.wait()

    def drain(self) -> list[WorkItem]:
        """Remove every queued item (shutdown)."""
        return self.policy.drain()

    def _drop(self, item: WorkItem, error: OcrError | None = None) -> None:
        if not item.future.done():
            item.future.set_exception(error or DeadlineExceeded())
        if self._on_drop is not None:
            self._on_drop(item)
