"""What the simulator records while it runs: outcomes, latencies, batches, queue waits, a timeline.

Only what falls inside the measured window counts (requests that arrived after the warm-up and
before the end of traffic; batches started in that window), so the cost model's first
measurements and the final drain do not blur the figures. Memory stays bounded: latencies are
kept in `array`s, everything else in counters.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field

KINDS = ("interactive", "background")
OUTCOMES = ("ok", "shed", "deadline", "cancelled")
"""200; 503 (admission or a full queue); 504; the client went away (499)."""


@dataclass(slots=True)
class KindStats:
    """Requests of one kind (interactive requests, or job page attempts)."""

    outcomes: Counter[str] = field(default_factory=Counter)
    pages_ok: int = 0
    """Pages of answered requests that arrived in the window."""
    pages_done: int = 0
    """Pages answered within the window (the throughput's numerator)."""
    latencies_s: array[float] = field(default_factory=lambda: array("d"))
    done_bins: array[int] = field(default_factory=lambda: array("i"))
    """Timeline bin of each latency sample (its answer's time)."""


@dataclass(slots=True)
class BatchStats:
    """Batches one device ran for one stage."""

    batches: int = 0
    rows: Counter[int] = field(default_factory=Counter)
    """Batch size (rows: pages for det, crops for rec) -> batches."""
    items: int = 0
    compute_s: float = 0.0
    cost: int = 0


@dataclass(slots=True)
class WaitStats:
    """Queue waits of one stage: from submit to the batch's start."""

    count: int = 0
    total_s: float = 0.0
    max_s: float = 0.0

    def add(self, wait_s: float) -> None:
        """One item's wait."""
        self.count += 1
        self.total_s += wait_s
        if wait_s > self.max_s:
            self.max_s = wait_s


@dataclass(slots=True)
class Recorder:
    """Everything measured in the window [`start_s`, `end_s`)."""

    start_s: float
    end_s: float
    bin_s: float
    kinds: dict[str, KindStats] = field(default_factory=lambda: {k: KindStats() for k in KINDS})
    batches: dict[tuple[str, str], BatchStats] = field(default_factory=dict)
    waits: dict[str, WaitStats] = field(default_factory=dict)
    device_busy_bins: dict[str, array[float]] = field(default_factory=dict)
    arrivals_bins: array[int] = field(default_factory=lambda: array("i"))
    pages_bins: dict[str, array[int]] = field(default_factory=dict)
    dropped_items: int = 0
    """Items the policy dropped as expired or abandoned."""
    cpu_busy_s: float = 0.0
    """CPU-worker seconds of calls started in the window (discarded results included)."""
    cpu_busy_bins: array[float] = field(default_factory=lambda: array("d"))
    thread_busy_s: dict[str, float] = field(default_factory=dict)
    """Device name -> seconds its worker's thread spent on steps started in the window."""

    def __post_init__(self) -> None:
        bins = self.bins
        self.arrivals_bins = array("i", bytes(4 * bins))
        self.pages_bins = {k: array("i", bytes(4 * bins)) for k in KINDS}
        self.cpu_busy_bins = array("d", bytes(8 * bins))

    @property
    def bins(self) -> int:
        """Timeline bins over the whole run, warm-up included."""
        return max(1, int(self.end_s / self.bin_s + 0.5))

    @property
    def window_s(self) -> float:
        """Length of the measured window."""
        return self.end_s - self.start_s

    def in_window(self, t: float) -> bool:
        """Whether `t` falls in the measured window."""
        return self.start_s <= t < self.end_s

    def _bin(self, t: float) -> int:
        return min(int(t / self.bin_s), self.bins - 1)

    def arrival(self, now: float) -> None:
        """An interactive request arrived."""
        if now < self.end_s:
            self.arrivals_bins[self._bin(now)] += 1

    def request_ended(
        self, kind: str, outcome: str, arrival: float, now: float, pages: int
    ) -> None:
        """A request (or job page attempt) ended with `outcome`."""
        stats = self.kinds[kind]
        if outcome == "ok":
            if now < self.end_s:
                self.pages_bins[kind][self._bin(now)] += pages
            if self.in_window(now):
                stats.pages_done += pages
        if not self.in_window(arrival):
            return
        stats.outcomes[outcome] += 1
        if outcome == "ok":
            stats.pages_ok += pages
            stats.latencies_s.append(now - arrival)
            stats.done_bins.append(self._bin(now))

    def batch(
        self,
        device: str,
        stage: str,
        rows: int,
        items: int,
        cost: int,
        start: float,
        seconds: float,
    ) -> None:
        """A batch of `rows` started at `start` and computed for `seconds`."""
        busy = self.device_busy_bins.get(device)
        if busy is None:
            busy = self.device_busy_bins[device] = array("d", bytes(8 * self.bins))
        if start < self.end_s:
            busy[self._bin(start)] += seconds
        if not self.in_window(start):
            return
        key = (device, stage)
        stats = self.batches.get(key)
        if stats is None:
            stats = self.batches[key] = BatchStats()
        stats.batches += 1
        stats.rows[rows] += 1
        stats.items += items
        stats.compute_s += seconds
        stats.cost += cost

    def wait(self, stage: str, wait_s: float, now: float) -> None:
        """An item waited `wait_s` in its queue before its batch started."""
        if not self.in_window(now):
            return
        stats = self.waits.get(stage)
        if stats is None:
            stats = self.waits[stage] = WaitStats()
        stats.add(wait_s)

    def cpu_call(self, start: float, seconds: float) -> None:
        """A CPU-worker call started at `start` and runs for `seconds`."""
        if start < self.end_s:
            self.cpu_busy_bins[self._bin(start)] += seconds
        if self.in_window(start):
            self.cpu_busy_s += seconds

    def thread(self, device: str, start: float, seconds: float) -> None:
        """`device`'s worker thread took a step of `seconds` at `start`."""
        if self.in_window(start):
            self.thread_busy_s[device] = self.thread_busy_s.get(device, 0.0) + seconds
