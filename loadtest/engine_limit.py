"""The offline engine limit: our whole pipeline in one process, page after page, no server.

This is the yardstick for the server's throughput: the same models, engine settings and pages,
with nothing overlapped and no IPC. `python -m loadtest.engine_limit --pages 10` prints pages/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import cv2
import numpy as np

from serving.config import load_config
from serving.convert import pdf_pages
from serving.engine.local import LocalEngine


@dataclass(frozen=True, slots=True)
class EngineLimit:
    """Page-after-page throughput of the in-process engine."""

    pages: int
    lines: int
    wall_s: float
    pages_per_s: float
    median_page_s: float
    mean_page_s: float


def real_page_set(n: int, dpi: float = 150.0) -> list[tuple[str, np.ndarray, str]]:
    """`n` text pages spread over the real PDFs: (label, BGR image, text-layer truth)."""
    pdfs = pdf_pages.find_real_pdfs()
    if not pdfs:
        raise RuntimeError("no real PDFs found; run scripts/system-deps.sh")
    chosen: list[tuple[str, np.ndarray, str]] = []
    for pdf, count in zip(pdfs, pdf_pages.spread(n, len(pdfs)), strict=True):
        chosen.extend((p.label, p.image, p.text) for p in pdf_pages.text_pages(pdf, count, dpi=dpi))
    return chosen


def write_page_set(page_set: Sequence[tuple[str, np.ndarray, str]], out_dir: Path) -> list[Path]:
    """Save the pages as lossless PNGs (the server then sees the engine's exact pixels)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for label, image, _ in page_set:
        path = out_dir / f"{label}.png"
        cv2.imwrite(str(path), image)
        paths.append(path)
    return paths


def measure(
    engine: LocalEngine, images: Sequence[np.ndarray], *, warmup: int = 1, rounds: int = 1
) -> tuple[EngineLimit, list[list[str]]]:
    """OCR every image in turn, `rounds` times, after `warmup` untimed pages.

    More than one round visits each page as often as a load test's level does (which sends
    every page twice by default), so the medians of the two are taken over the same pages.
    Returns the figures and each page's texts from the first round.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    for image in images[:warmup]:
        engine.ocr(image)
    times = []
    texts = []
    started = time.monotonic()
    for round_ in range(rounds):
        for image in images:
            t0 = time.monotonic()
            lines = engine.ocr(image).lines
            times.append(time.monotonic() - t0)
            if round_ == 0:
                texts.append([line.text for line in lines])
    wall = time.monotonic() - started
    limit = EngineLimit(
        pages=len(times),
        lines=sum(len(t) for t in texts),
        wall_s=round(wall, 3),
        pages_per_s=round(len(times) / wall, 4),
        median_page_s=round(statistics.median(times), 4),
        mean_page_s=round(statistics.fmean(times), 4),
    )
    return limit, texts


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: measure the engine limit on real document pages."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.engine_limit", description=__doc__)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--dpi", type=float, default=150.0)
    parser.add_argument(
        "--config", type=Path, help="config.toml (engine settings); OCR_* variables override it"
    )
    parser.add_argument(
        "--pages-dir", type=Path, help="PNG and JPEG pages to use instead of rendering"
    )
    parser.add_argument("--json", type=Path, help="write the result and each page's texts here")
    parser.add_argument("--rounds", type=int, default=1, help="times through the page set")
    args = parser.parse_args(argv)
    # As the server reads it: the file (else the defaults), then `OCR_<SECTION>__<KEY>` variables.
    config = load_config(args.config, os.environ)
    engine = LocalEngine(config)
    engine.load()
    if args.pages_dir is not None:
        paths = sorted(p for p in args.pages_dir.iterdir() if p.suffix in (".png", ".jpg"))
        names = [p.name for p in paths]
        images = [cv2.imread(str(p), cv2.IMREAD_COLOR) for p in paths]
    else:
        page_set = real_page_set(args.pages, args.dpi)
        names = [label for label, _, _ in page_set]
        images = [image for _, image, _ in page_set]
    result, texts = measure(engine, images, rounds=args.rounds)
    print(json.dumps(asdict(result)))
    if args.json is not None:
        data = {**asdict(result), "texts": dict(zip(names, texts, strict=True))}
        args.json.write_text(json.dumps(data, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
