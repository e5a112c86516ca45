"""Peak memory of the server's whole process tree for hostile-but-legal PDFs: a few KB each,
pages of many square inches.

    python -m loadtest.bench.memory_peak --pages 4 --inches 92 --budget-mib 2048 --concurrent 1 \
        --concurrent 8 --out memory-out

Starts `ocr-serve` (one CPU device, two device workers, two CPU workers), and for each
N of `--levels` sends N copies at once of one PDF of `--pages` blank pages of `--inches` x
`--inches` to `/v1/ocr`, while `TreeSampler` samples every 20 ms the memory of the main process
and all its descendants plus the server's shared-memory segments. Prints one JSON line per run:
statuses, seconds, the idle footprint before the run, the peaks in MiB, and whether the peak kept
within the idle footprint plus the budget. A measurement, not a test (that is
`tests/e2e/test_bounded_memory.py`): compare budgets (or builds) side by side in one run.
"""

from __future__ import annotations

import argparse
import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx
import psutil
import pypdfium2 as pdfium

from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.servers import start_ours
from serving.workers.shm import server_prefix

MIB = 1 << 20


def hostile_pdf(pages: int, inches: float) -> bytes:
    """`pages` blank pages of `inches` x `inches`: a few KB, each page near the pixel cap."""
    doc = pdfium.PdfDocument.new()
    for _ in range(pages):
        doc.new_page(inches * 72, inches * 72)
    buffer = io.BytesIO()
    doc.save(buffer)
    doc.close()
    return buffer.getvalue()


def segment_bytes(pid: int) -> int:
    """Bytes of the shared-memory segments of the server whose main process is `pid`."""
    total = 0
    for path in Path("/dev/shm").glob(f"{server_prefix(pid)}*"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


@dataclass(frozen=True, slots=True)
class TreeMemory:
    """One sample of a server's memory, all processes together."""

    private_bytes: int
    """RSS less its shared-memory part (`RssAnon + RssFile`), summed over the process tree."""
    rss_bytes: int
    """Plain RSS summed over the tree: counts a segment once per process that touched it."""
    shm_bytes: int
    """Bytes of the server's segments in /dev/shm (tmpfs: no process's RSS holds them alone)."""

    @property
    def total_bytes(self) -> int:
        """What the tree holds: private memory plus its segments, each byte counted once."""
        return self.private_bytes + self.shm_bytes


def process_memory(pid: int) -> tuple[int, int]:
    """(RSS less its shared-memory part, RSS) of one process, from /proc/PID/status."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssShmem"):
                fields[name] = int(value.split()[0]) * 1024
    rss = fields.get("VmRSS", 0)
    return rss - fields.get("RssShmem", 0), rss


def tree_memory(pid: int) -> TreeMemory:
    """The memory of the server whose main process is `pid`: every process of its tree, and its
    shared-memory segments."""
    private = rss = 0
    try:
        root = psutil.Process(pid)
        pids = [pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.NoSuchProcess:
        pids = []
    for each in pids:
        try:
            own, whole = process_memory(each)
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited between the listing and the read
        private += own
        rss += whole
    return TreeMemory(private_bytes=private, rss_bytes=rss, shm_bytes=segment_bytes(pid))


@dataclass(slots=True)
class TreeSampler:
    """Samples `tree_memory` every `interval_s` in a thread, keeping the peaks."""

    pid: int
    interval_s: float = 0.02
    peak_total_bytes: int = 0
    peak_private_bytes: int = 0
    peak_rss_bytes: int = 0
    peak_shm_bytes: int = 0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> TreeMemory:
        """One sample, taken into the peaks."""
        now = tree_memory(self.pid)
        self.peak_total_bytes = max(self.peak_total_bytes, now.total_bytes)
        self.peak_private_bytes = max(self.peak_private_bytes, now.private_bytes)
        self.peak_rss_bytes = max(self.peak_rss_bytes, now.rss_bytes)
        self.peak_shm_bytes = max(self.peak_shm_bytes, now.shm_bytes)
        self.samples += 1
        return now

    def __enter__(self) -> TreeSampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def peaks_mib(self) -> dict[str, int]:
        """The peaks, in MiB."""
        return {
            "peak_total_mib": round(self.peak_total_bytes / MIB),
            "peak_private_mib": round(self.peak_private_bytes / MIB),
            "peak_rss_sum_mib": round(self.peak_rss_bytes / MIB),
            "peak_shm_mib": round(self.peak_shm_bytes / MIB),
        }


def idle_footprint(pid: int, seconds: float = 1.0) -> int:
    """The most the idle server's tree holds (`TreeMemory.total_bytes`) over `seconds`."""
    sampler = TreeSampler(pid)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sampler.sample()
        time.sleep(0.05)
    return sampler.peak_total_bytes


@dataclass(frozen=True, slots=True)
class Answers:
    """What `post_pdfs` got: the last response of each request, and how many 503s it retried."""

    responses: list[httpx.Response]
    retried: int

    @property
    def statuses(self) -> list[int]:
        """The final statuses, in order."""
        return [r.status_code for r in self.responses]


def post_pdfs(url: str, pdf: bytes, copies: int, timeout_s: float) -> Answers:
    """`copies` requests of `pdf` to `/v1/ocr` at once, each sent again after its Retry-After
    when it is shed with 503, as a well-behaved client does, until `timeout_s` has passed."""
    retried = [0]

    def post(_: int) -> httpx.Response:
        deadline = time.monotonic() + timeout_s
        while True:
            response = httpx.post(
                f"{url}/v1/ocr",
                content=pdf,
                headers={"content-type": "application/pdf"},
                timeout=timeout_s,
            )
            if response.status_code != 503 or time.monotonic() > deadline:
                return response
            retried[0] += 1
            time.sleep(float(response.headers.get("retry-after", "1")))

    with ThreadPoolExecutor(copies) as pool:
        responses = list(pool.map(post, range(copies)))
    return Answers(responses=responses, retried=retried[0])


def server_config(pages: int, budget_mib: int, inflight_pages: int) -> str:
    """The server's config: CPU devices only, a budget of `budget_mib` (0 = the default)."""
    budget = f"memory_budget_bytes = {budget_mib * MIB}\n" if budget_mib else ""
    return (
        f"[server]\n{budget}request_timeout_s = 1800.0\nmax_inflight_pages = {inflight_pages}\n"
        f"[input]\nmax_pdf_pages = {max(pages, 1)}\n"
        '[workers]\ndevices = ["cpu"]\ncpu_workers = 2\n'
    )


def measure(
    pages: int, inches: float, budget_mib: int, copies: list[int], out: Path, inflight_pages: int
) -> list[dict[str, object]]:
    """Start a server, send each count of copies of the PDF at once, and return what was seen."""
    out.mkdir(parents=True, exist_ok=True)
    server = start_ours(out, server_config(pages, budget_mib, inflight_pages))
    results: list[dict[str, object]] = []
    try:
        server.wait_ready("/readyz")
        ready = httpx.get(f"{server.url}/readyz", timeout=10).json()
        budget = int(ready["page_costs"]["budget_bytes"])  # the whole budget, not pages' share
        pdf = hostile_pdf(pages, inches)
        for count in copies:
            idle = idle_footprint(server.process.pid)
            started = time.monotonic()
            with TreeSampler(server.process.pid) as sampler:
                answers = post_pdfs(server.url, pdf, count, 1800)
            seconds = time.monotonic() - started
            scaled = sum(
                "scaled_from" in page
                for r in answers.responses
                if r.status_code == 200
                for page in r.json()["pages"]
            )
            results.append(
                {
                    "pages": pages,
                    "inches": inches,
                    "pdf_bytes": len(pdf),
                    "concurrent": count,
                    "budget_mib": round(budget / MIB),
                    "statuses": sorted(answers.statuses),
                    "retried_503": answers.retried,
                    "pages_scaled": scaled,
                    "seconds": round(seconds, 1),
                    "idle_mib": round(idle / MIB),
                    **sampler.peaks_mib(),
                    "samples": sampler.samples,
                    "within_budget": sampler.peak_total_bytes <= idle + budget,
                    "engine_bytes_per_det_px": ready.get("page_costs", {}).get(
                        "engine_bytes_per_det_px"
                    ),
                }
            )
    finally:
        server.stop()
    return results


def _mib_list(text: str) -> list[int]:
    values = [int(x) for x in text.split(",") if x.strip()]
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"MiB values of at least 0, got {text!r}")
    return values


@register
class MemoryPeak(Scenario):
    """The server tree's peak memory for PDFs of huge pages, per budget and concurrency."""

    name = "memory-peak"
    help = "peak memory of the server's process tree for small PDFs of huge pages, per budget"
    shared = ("out", "pages", "levels")
    defaults: ClassVar[dict[str, Any]] = {"pages": 4, "levels": [1]}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument("--inches", type=float, default=92.0, help="each page's side")
        parser.add_argument(
            "--budget-mib",
            type=_mib_list,
            default=[0],
            help="server.memory_budget_bytes in MiB, a server each (0 = the default; default 0)",
        )
        parser.add_argument("--max-inflight-pages", type=int, default=64)

    def run(self, args: argparse.Namespace) -> Results:
        """Each budget's server, each level's copies sent at once."""
        rows = []
        for budget in args.budget_mib:
            rows += measure(
                args.pages,
                args.inches,
                budget,
                args.levels,
                args.out / f"budget-{budget}",
                args.max_inflight_pages,
            )
        lines = [
            "| budget MiB | PDFs at once | statuses | seconds | idle MiB | peak MiB | within |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['budget_mib']} | {r['concurrent']} | {r['statuses']} | {r['seconds']} | "
                f"{r['idle_mib']} | {r.get('peak_total_mib', '-')} | {r['within_budget']} |"
            )
        peaks = {
            f"budget {r['budget_mib']}, {r['concurrent']} at once": float(
                str(r.get("peak_total_mib", 0))
            )
            for r in rows
        }
        for r in rows:
            r.pop("samples", None)
        return Results(
            data={"runs": rows},
            markdown="\n".join(lines) + "\n",
            plots={"peak_mib": bars("Peak memory of the server tree", "MiB", peaks)},
        )
