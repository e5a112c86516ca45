"""What an output format costs a server: pages/s of `/v1/ocr` answered as JSON and as each
other format, on the same real pages, at the same concurrency.

    ocr-bench outputs --pages 8 --repeats 3 [--url http://127.0.0.1:8000]

Text pages of Debian's manuals (`serving.convert.pdf_pages`) are rendered at `--dpi` and sent as
JPEG scans; each of `--repeats` rounds sends every page once in every format (`?format=`), the
formats in turn, at the first of `--levels`, so that a slower or busier stretch of the run falls
on all of them alike: pages/s per format, its ratio to JSON and the mean answer size. The server
is `--url`'s, else ours on the default config, started here. The format's work runs in the
server's CPU workers (`serving.outputs`): on a server whose CPU workers are the bottleneck, the
PDF's share shows here.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any, ClassVar

import cv2
import httpx
import numpy as np

from loadtest.bench.options import comma_list
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.servers import OURS_CPU_TOML, start_ours
from serving.convert.pdf_pages import find_real_pdfs, render_pdf_pages, select_text_pages

FORMATS = ("json", "text", "hocr", "alto", "pdf")


def scans(count: int, dpi: float) -> list[bytes]:
    """`count` text pages of the Debian manuals as JPEG scans."""
    pages: list[bytes] = []
    for pdf in find_real_pdfs():
        for index in select_text_pages(pdf, count - len(pages)):
            (image,) = render_pdf_pages(pdf, dpi=dpi, first=index, count=1)
            ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])
            if ok:
                pages.append(data.tobytes())
        if len(pages) >= count:
            return pages
    if not pages:
        raise SystemExit("no Debian doc PDFs: run scripts/system-deps.sh")
    return pages


async def _round(
    client: httpx.AsyncClient, url: str, pages: list[bytes], fmt: str, concurrency: int
) -> tuple[float, list[int]]:
    """Every page once as `fmt`: elapsed seconds and the answers' sizes."""
    gate = asyncio.Semaphore(concurrency)
    sizes: list[int] = []

    async def one(page: bytes) -> None:
        async with gate:
            answer = await client.post(
                f"{url}/v1/ocr",
                params={"format": fmt},
                content=page,
                headers={"content-type": "image/jpeg"},
            )
            answer.raise_for_status()
            sizes.append(len(answer.content))

    started = time.monotonic()
    await asyncio.gather(*(one(page) for page in pages))
    return time.monotonic() - started, sizes


async def measure(
    url: str, pages: list[bytes], formats: tuple[str, ...], rounds: int, concurrency: int
) -> dict[str, dict[str, float]]:
    """Pages/s and mean answer bytes per format, over `rounds` rounds (one warm-up first)."""
    elapsed = dict.fromkeys(formats, 0.0)
    sizes: dict[str, list[int]] = {fmt: [] for fmt in formats}
    async with httpx.AsyncClient(timeout=600) as client:
        for fmt in formats:  # warm-up: every path once
            await _round(client, url, pages[:1], fmt, 1)
        for _ in range(rounds):
            for fmt in formats:
                seconds, got = await _round(client, url, pages, fmt, concurrency)
                elapsed[fmt] += seconds
                sizes[fmt] += got
    rate = {fmt: rounds * len(pages) / elapsed[fmt] for fmt in formats}
    return {
        fmt: {
            "pages_per_s": rate[fmt],
            "vs_json": rate[fmt] / rate["json"] if "json" in rate else float("nan"),
            "mean_bytes": float(np.mean(sizes[fmt])),
        }
        for fmt in formats
    }


@register
class Outputs(Scenario):
    """Pages/s of each output format against JSON's, on one server."""

    name = "outputs"
    help = "what each output format (text, hOCR, ALTO, PDF) costs against JSON, pages/s"
    shared = ("out", "pages", "dpi", "repeats", "levels")
    defaults: ClassVar[dict[str, Any]] = {"repeats": 3, "levels": [4]}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument("--url", help="a running ocr-serve (default: ours, started here)")
        parser.add_argument(
            "--formats",
            type=comma_list(FORMATS),
            default=list(FORMATS),
            help=f"comma-separated (default {','.join(FORMATS)})",
        )

    def run(self, args: argparse.Namespace) -> Results:
        """Every format in turn, `--repeats` rounds."""
        pages = scans(args.pages, args.dpi)
        formats = tuple(args.formats)
        if args.url:
            results = asyncio.run(measure(args.url, pages, formats, args.repeats, args.levels[0]))
        else:
            config = OURS_CPU_TOML + f'[jobs]\ndata_dir = "{args.out / "jobs"}"\n'
            server = start_ours(args.out, config)
            try:
                server.wait_ready("/readyz")
                results = asyncio.run(
                    measure(server.url, pages, formats, args.repeats, args.levels[0])
                )
            finally:
                server.stop()
        lines = ["| format | pages/s | vs JSON | mean answer |", "|---|---|---|---|"]
        for fmt, row in results.items():
            lines.append(
                f"| {fmt} | {row['pages_per_s']:.2f} | {row['vs_json']:.1%} "
                f"| {row['mean_bytes'] / 1024:.0f} KiB |"
            )
        speeds = {fmt: row["pages_per_s"] for fmt, row in results.items()}
        return Results(
            data=results,
            markdown="\n".join(lines) + "\n",
            plots={"pages_s": bars(f"Pages/s at c={args.levels[0]}", "pages/s", speeds)},
        )
