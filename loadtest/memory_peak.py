"""Peak memory of the server for one hostile-but-legal PDF: a few KB, pages of many square inches.

    python -m loadtest.memory_peak --pages 10 --inches 92 --budget-mib 2048 --out memory-out

Starts `ocr-serve` (one CPU device, two CPU workers), sends one PDF of `--pages` blank pages of
`--inches` x `--inches` to `/v1/ocr`, and samples every 50 ms the resident memory of the whole
process tree and the bytes of its shared-memory segments (tmpfs, counted apart from RSS). Prints
one JSON line: status, seconds, peaks in MiB. A measurement, not a test: compare budgets (or
builds) side by side in one run.
"""

from __future__ import annotations

import argparse
import io
import json
import threading
import time
from pathlib import Path

import httpx
import pypdfium2 as pdfium

from loadtest.servers import MemorySampler, start_ours
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


def measure(pages: int, inches: float, budget_mib: int, out: Path) -> dict[str, object]:
    """Start a server, send the PDF once, and return what was seen."""
    out.mkdir(parents=True, exist_ok=True)
    budget = f"memory_budget_bytes = {budget_mib * MIB}\n" if budget_mib else ""
    config = (
        f"[server]\n{budget}request_timeout_s = 1800.0\n"
        f"[input]\nmax_pdf_pages = {max(pages, 1)}\n"
        '[workers]\ndevices = ["cpu"]\ncpu_workers = 2\n'
    )
    server = start_ours(out, config)
    try:
        server.wait_ready("/readyz")
        pdf = hostile_pdf(pages, inches)
        rss = MemorySampler(server.process.pid)
        peaks = {"rss": 0, "shm": 0, "total": 0}
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                now_rss, now_shm = rss.sample(), segment_bytes(server.process.pid)
                peaks["rss"] = max(peaks["rss"], now_rss)
                peaks["shm"] = max(peaks["shm"], now_shm)
                peaks["total"] = max(peaks["total"], now_rss + now_shm)
                stop.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        baseline = rss.sample()
        sampler.start()
        started = time.monotonic()
        response = httpx.post(
            f"{server.url}/v1/ocr",
            content=pdf,
            headers={"content-type": "application/pdf"},
            timeout=1800,
        )
        seconds = time.monotonic() - started
        stop.set()
        sampler.join()
        return {
            "pages": pages,
            "inches": inches,
            "pdf_bytes": len(pdf),
            "budget_mib": budget_mib or "default",
            "status": response.status_code,
            "seconds": round(seconds, 1),
            "baseline_rss_mib": round(baseline / MIB),
            "peak_rss_mib": round(peaks["rss"] / MIB),
            "peak_shm_mib": round(peaks["shm"] / MIB),
            "peak_total_mib": round(peaks["total"] / MIB),
        }
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    """Entry point: print one JSON line per budget."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--inches", type=float, default=92.0)
    parser.add_argument(
        "--budget-mib",
        type=int,
        action="append",
        help="server.memory_budget_bytes in MiB (repeat to compare; 0 = the default)",
    )
    parser.add_argument("--out", type=Path, default=Path("memory-out"))
    args = parser.parse_args(argv)
    for budget in args.budget_mib or [0]:
        result = measure(args.pages, args.inches, budget, args.out / f"budget-{budget}")
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
