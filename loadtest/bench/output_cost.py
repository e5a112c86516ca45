"""What an output format costs a running server: pages/s of `/v1/ocr` answered as JSON and as
each other format, on the same real pages, at the same concurrency.

    python -m loadtest.bench.output_cost --url http://127.0.0.1:8000 --pages 8 --rounds 3

Text pages of Debian's manuals (`serving.convert.pdf_pages`) are rendered at `--dpi` and sent as
JPEG scans; each round sends every page once in every format (`?format=`), the formats in turn, at
`--concurrency`, so that a slower or busier stretch of the run falls on all of them alike.
Prints pages/s per format, its ratio to JSON and the mean answer size, and writes them as JSON
to `--out` when given. The format's work runs in the server's CPU workers (`serving.outputs`):
on a server whose CPU workers are the bottleneck, the PDF's share shows here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import cv2
import httpx
import numpy as np

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url", required=True, help="a running ocr-serve, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument("--pages", type=int, default=8, help="real pages (default 8)")
    parser.add_argument("--dpi", type=float, default=150.0, help="scan resolution (default 150)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every format (default 3)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated formats")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    results = asyncio.run(
        measure(args.url, scans(args.pages, args.dpi), formats, args.rounds, args.concurrency)
    )
    print("| format | pages/s | vs JSON | mean answer |")
    print("|---|---|---|---|")
    for fmt, row in results.items():
        print(
            f"| {fmt} | {row['pages_per_s']:.2f} | {row['vs_json']:.1%} "
            f"| {row['mean_bytes'] / 1024:.0f} KiB |"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
