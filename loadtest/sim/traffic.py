"""Simulated traffic: what arrives (pages, lines, chunk widths) and when (Poisson with bursts,
closed-loop clients, background job pages), drawn from one seeded random generator.

A page is reduced to what the scheduler and the latency models see: its detector input shape
(`pipelines.det_preprocess.det_input_size`, the server's own rounding), its text lines, and its
recognition chunks, cut as `pipelines.rec_preprocess.plan_rec_chunks` cuts them: lines sorted by
width, 6 per chunk, padded to the chunk's widest, at least 320 and at most 3200 px wide. With
`TrafficConfig.batching = "bucketed"` (`[engine] batching`), as the server pads then: lines
grouped by width bucket and each chunk padded to its bucket, the detector input padded to
multiples of `det_step_px`; batch costs (padded pixels, padded width x rows) follow.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field

from models.torch_options import TorchOptions
from pipelines.det_preprocess import det_bucket, det_input_size
from pipelines.rec_preprocess import width_bucket
from pipelines.types import DetParams, RecParams
from serving.config import JobsConfig
from serving.scheduling.batch_shapes import BatchingMode

_TORCH = TorchOptions()

LINE_WIDTH_QUANTILES = (36, 42, 131, 296, 446, 680, 997, 1356, 1716, 1788, 1971, 2132, 2558)
"""Widths of the bench's 307 text lines resized to height 48 (px), at quantiles 0, 0.05, 0.1,
0.2, ..., 0.9, 0.95, 1: measured on this machine (8 pages of the Debian PDFs at 150 dpi)."""
_QUANTILE_LEVELS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)

BENCH_PAGES: tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...] = (
    (1275, 1651, ((6, 331), (6, 780), (6, 1293), (6, 1684), (6, 1757), (6, 1759), (3, 1920))),
    (1275, 1651, ((6, 333), (6, 1060), (6, 1528), (6, 1716), (6, 1788), (6, 1788), (6, 1792),
                  (3, 1869))),
    (1271, 1644, ((6, 580), (6, 1070), (6, 1702), (6, 1753), (6, 1852), (6, 2006), (4, 2047))),
    (1271, 1644, ((6, 320), (6, 320), (6, 320), (6, 320), (6, 320), (6, 320), (6, 384), (6, 446),
                  (6, 556), (6, 843), (6, 1694), (4, 1996))),
    (1241, 1754, ((6, 338), (6, 523), (6, 799), (6, 1440), (6, 2044), (6, 2136), (6, 2174),
                  (3, 2558))),
    (1241, 1754, ((6, 864), (6, 1116), (5, 2222))),
    (1241, 1754, ((6, 320), (6, 524), (6, 878), (6, 1250), (6, 1770), (5, 2128))),
    (1241, 1754, ((6, 677), (6, 1159), (4, 2224))),
)  # fmt: skip
"""`make bench`'s 8 pages as measured here: (width, height, recognition chunks as (crops, padded
width)), in the bench's order."""


@dataclass(frozen=True, slots=True)
class PageSpec:
    """One page as the scheduler sees it."""

    det_h: int
    det_w: int
    lines: int
    chunks: tuple[tuple[int, int], ...]
    """(crops, padded width) per recognition chunk."""

    @property
    def det_pixels(self) -> int:
        """The detector input's pixels: the det item's cost."""
        return self.det_h * self.det_w


@dataclass(frozen=True, slots=True, kw_only=True)
class PageKind:
    """A kind of page in the mix: its size in pixels and its share."""

    name: str
    width: int
    height: int
    weight: float


DEFAULT_PAGE_KINDS = (
    PageKind(name="A4 scan, 150 dpi", width=1240, height=1754, weight=0.45),
    PageKind(name="Letter scan, 150 dpi", width=1275, height=1650, weight=0.2),
    PageKind(name="PDF page rendered at 144 dpi", width=1190, height=1684, weight=0.15),
    PageKind(name="phone photo", width=1512, height=2016, weight=0.1),
    PageKind(name="screenshot", width=1280, height=720, weight=0.05),
    PageKind(name="receipt", width=576, height=1600, weight=0.05),
)
"""An assumed mix of page sizes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrafficConfig:
    """Interactive requests (`/v1/ocr`) and background job pages."""

    rate_pages_s: float = 0.0
    """Open loop: Poisson arrivals of requests carrying this many pages a second on average."""
    concurrency: int = 0
    """Closed loop instead: this many clients, each sending its next request when answered."""
    single_page_share: float = 0.7
    """Requests of one page; the others have 2..`max_pages` pages, uniformly."""
    max_pages: int = 10
    page_kinds: tuple[PageKind, ...] = DEFAULT_PAGE_KINDS
    lines: tuple[int, int] = (2, 40)
    """Text lines per page, uniformly in this range (inclusive)."""
    bench_pages: bool = False
    """Send the bench's 8 measured pages in turn instead (one page a request)."""
    rec_width_multiple: int = 1
    """Round recognition chunk widths up to a multiple of this (1: exact, as the server does;
    larger: what if chunks were padded further so that more of them batch together)."""
    batching: BatchingMode = "exact"
    """`[engine] batching` as the server runs it (`scenarios.build` resolves "auto")."""
    rec_widths_px: tuple[int, ...] = _TORCH.rec_widths_px
    """Bucketed mode's width buckets (`[engine.torch] rec_widths_px`)."""
    det_step_px: int = _TORCH.det_step_px
    """Bucketed mode's detector step (`[engine.torch] det_step_px`)."""
    timeout_s: float = 300.0
    """`server.request_timeout_s`: a request not answered by then gets 504."""
    cancel_share: float = 0.0
    """Requests whose client goes away before the answer (a uniform time in `cancel_after_s`)."""
    cancel_after_s: tuple[float, float] = (1.0, 30.0)
    burst_every_s: float = 0.0
    """Every this many seconds a burst starts (0: none)..."""
    burst_s: float = 10.0
    """...lasts this long..."""
    burst_factor: float = 3.0
    """...and multiplies the arrival rate by this."""
    client_gap_s: float = 0.0
    """A closed-loop client's time between an answer and its next request (reading the answer,
    encoding and uploading the next file)."""
    retry_after_s: float = 2.0
    """A closed-loop client told 503 waits this long (the server's Retry-After)."""
    job_pages: int = 0
    """Background job pages queued at the start; -1: an endless job (full speed)."""
    job_max_inflight_pages: int = 8
    """`jobs.max_inflight_pages`."""
    job_timeout_s: float = JobsConfig().page_timeout_s
    """`jobs.page_timeout_s`: a job page's deadline."""
    job_min_share: float = JobsConfig().min_share
    """`jobs.min_share`: the devices' time job pages keep while interactive work waits."""

    @property
    def mean_pages(self) -> float:
        """Pages per interactive request, on average."""
        if self.bench_pages:
            return 1.0
        multi = (2 + self.max_pages) / 2 if self.max_pages >= 2 else 1.0
        return self.single_page_share + (1 - self.single_page_share) * multi


@dataclass(frozen=True, slots=True)
class RequestDraw:
    """One interactive request as drawn at its arrival; its pages are drawn from `seed` once it
    is admitted, so every configuration sees the same requests whatever it sheds."""

    pages: int
    seed: int
    cancel_after_s: float | None
    """When its client goes away, from its arrival; None if it waits."""


@dataclass(slots=True)
class TrafficSource:
    """Draws arrivals, requests and pages for one run, each from its own random stream."""

    config: TrafficConfig
    rng: random.Random
    det: DetParams = field(default_factory=DetParams)
    rec: RecParams = field(default_factory=RecParams)
    _arrivals: random.Random = field(init=False)
    _requests: random.Random = field(init=False)
    _ordinal: int = 0
    _cum_weights: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._arrivals = random.Random(self.rng.getrandbits(64))
        self._requests = random.Random(self.rng.getrandbits(64))
        total = 0.0
        for kind in self.config.page_kinds:
            total += kind.weight
            self._cum_weights.append(total)

    def rate_at(self, t: float) -> float:
        """Requests a second at time `t` (bursts included)."""
        c = self.config
        base = c.rate_pages_s / c.mean_pages
        if c.burst_every_s > 0 and t % c.burst_every_s < c.burst_s:
            return base * c.burst_factor
        return base

    def next_arrival(self, now: float) -> float | None:
        """The next open-loop arrival after `now` (thinning of a Poisson process); None when the
        rate is 0."""
        c = self.config
        peak = c.rate_pages_s / c.mean_pages * (c.burst_factor if c.burst_every_s > 0 else 1.0)
        if peak <= 0:
            return None
        t = now
        while True:
            t += self._arrivals.expovariate(peak)
            if self._arrivals.random() * peak <= self.rate_at(t):
                return t

    def next_request(self) -> RequestDraw:
        """The next interactive request: its page count, its pages' seed, its client's patience."""
        c, rng = self.config, self._requests
        single = rng.random() < c.single_page_share
        many = rng.randint(2, c.max_pages) if c.max_pages >= 2 else 1
        pages = 1 if c.bench_pages or single else many
        leaves = rng.random() < c.cancel_share
        after = rng.uniform(*c.cancel_after_s)
        seed = self._ordinal if c.bench_pages else rng.getrandbits(64)
        self._ordinal += 1
        return RequestDraw(pages, seed, after if leaves else None)

    def pages(self, draw: RequestDraw) -> list[PageSpec]:
        """The pages of a drawn request."""
        if self.config.bench_pages:
            return [self.bench_page(draw.seed + i) for i in range(draw.pages)]
        rng = random.Random(draw.seed)
        return [self.page(rng) for _ in range(draw.pages)]

    def bench_page(self, index: int) -> PageSpec:
        """The bench's page `index` (modulo its 8)."""
        width, height, chunks = BENCH_PAGES[index % len(BENCH_PAGES)]
        det_h, det_w = self._det_size(height, width)
        # Bucketed: each measured chunk at its widest line's bucket (its narrower lines may fall
        # in a smaller one on the server: an upper bound on the padding).
        chunks = tuple((rows, self._round(w)) for rows, w in chunks)
        return PageSpec(det_h, det_w, sum(rows for rows, _ in chunks), chunks)

    def page(self, rng: random.Random | None = None) -> PageSpec:
        """A page drawn from the mix (from this source's own stream unless `rng` is given)."""
        c = self.config
        if c.bench_pages:
            self._ordinal += 1
            return self.bench_page(self._ordinal - 1)
        rng = rng or self._requests
        pick = rng.random() * self._cum_weights[-1]
        kind = c.page_kinds[bisect.bisect_right(self._cum_weights, pick)]
        det_h, det_w = self._det_size(kind.height, kind.width)
        lines = rng.randint(*c.lines)
        widths = sorted(line_width(rng.random()) for _ in range(lines))
        return PageSpec(det_h, det_w, lines, self.chunks(widths))

    def chunks(self, sorted_widths: list[int]) -> tuple[tuple[int, int], ...]:
        """Recognition chunks of lines sorted by width, as the server cuts them (bucketed: the
        lines of each width bucket apart, each chunk at its bucket's width)."""
        size = self.rec.batch_size
        widths = [min(self.rec.max_width, max(self.rec.min_width, w)) for w in sorted_widths]
        groups: dict[int, list[int]] = {0: widths}
        if self.config.batching == "bucketed":
            groups = {}
            for w in widths:
                groups.setdefault(width_bucket(w, self.config.rec_widths_px), []).append(w)
        out = []
        for _, members in sorted(groups.items()):
            for start in range(0, len(members), size):
                part = members[start : start + size]
                out.append((len(part), self._round(part[-1])))
        return tuple(out)

    def _round(self, width: int) -> int:
        if self.config.batching == "bucketed":
            return width_bucket(width, self.config.rec_widths_px)
        multiple = self.config.rec_width_multiple
        if multiple <= 1:
            return width
        return min(self.rec.max_width, -(-width // multiple) * multiple)

    def _det_size(self, height: int, width: int) -> tuple[int, int]:
        """The detector input of a `width` x `height` page, padded to its bucket when bucketed."""
        det_h, det_w = det_input_size(height, width, self.det)
        if self.config.batching == "bucketed":
            return det_bucket(det_h, det_w, self.config.det_step_px)
        return det_h, det_w


def line_width(u: float) -> int:
    """A line's width at height 48 for the quantile `u`, from the measured quantiles (linear in
    between)."""
    i = min(bisect.bisect_right(_QUANTILE_LEVELS, u), len(_QUANTILE_LEVELS) - 1)
    lo_q, hi_q = _QUANTILE_LEVELS[i - 1], _QUANTILE_LEVELS[i]
    lo_w, hi_w = LINE_WIDTH_QUANTILES[i - 1], LINE_WIDTH_QUANTILES[i]
    return int(lo_w + (hi_w - lo_w) * (u - lo_q) / (hi_q - lo_q))
