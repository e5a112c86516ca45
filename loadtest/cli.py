"""`ocr-loadtest`: run load levels against an OCR server and write the reports."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from loadtest.client import API_NAMES, Api
from loadtest.documents import CONTENT_TYPES, Document, load_documents
from loadtest.report import markdown_table, write_reports
from loadtest.result import LevelResult
from loadtest.run import run_level

__all__ = ["build_parser", "main"]

_N = TypeVar("_N", int, float)


def _positive_list(convert: Callable[[str], _N]) -> Callable[[str], list[_N]]:
    def parse(text: str) -> list[_N]:
        try:
            values = [convert(part) for part in text.split(",") if part.strip()]
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"not a comma-separated list: {text!r}") from err
        if not values or any(not value > 0 for value in values):
            raise argparse.ArgumentTypeError(f"need positive values, got {text!r}")
        return values

    return parse


def _positive(convert: Callable[[str], _N]) -> Callable[[str], _N]:
    def parse(text: str) -> _N:
        try:
            value = convert(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from err
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``ocr-loadtest``."""
    parser = argparse.ArgumentParser(
        prog="ocr-loadtest",
        description="Load-test an OCR server: closed-loop concurrency levels or open-loop "
        "Poisson arrival rates; throughput, latency percentiles, errors and the server's "
        "batching figures from /metrics.",
    )
    parser.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument(
        "--api",
        required=True,
        choices=API_NAMES,
        help="paddlex: POST /ocr (JSON, base64); v1: POST /v1/ocr (raw bytes); "
        "rapidocr: RapidOCR's API server, POST /ocr (multipart image_file; images only)",
    )
    parser.add_argument(
        "--inputs",
        required=True,
        nargs="+",
        metavar="PATH",
        help=f"files or directories of {' '.join(sorted(CONTENT_TYPES))}; sent in a fixed order",
    )
    levels = parser.add_mutually_exclusive_group()
    levels.add_argument(
        "--concurrency",
        type=_positive_list(int),
        metavar="C1,C2",
        help="closed loop: workers per level (default 1)",
    )
    levels.add_argument(
        "--rate",
        type=_positive_list(float),
        metavar="R1,R2",
        help="open loop: Poisson arrivals per second, per level",
    )
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument(
        "--requests", type=_positive(int), help="measured requests per level (default 100)"
    )
    amount.add_argument("--duration-s", type=_positive(float), help="measured seconds per level")
    parser.add_argument("--warmup", type=int, default=0, help="unmeasured requests per level")
    parser.add_argument("--timeout-s", type=_positive(float), default=300.0, help="per request")
    parser.add_argument("--out", default="loadtest-results", help="report directory")
    parser.add_argument(
        "--max-time-s",
        type=_positive(float),
        default=3600.0,
        help="hard bound on the whole run; levels past it are cut or skipped (default 3600)",
    )
    parser.add_argument("--seed", type=int, default=0, help="open-loop schedule seed (default 0)")
    parser.add_argument(
        "--max-outstanding",
        type=_positive(int),
        default=256,
        help="open loop: arrivals beyond this many in flight are dropped (default 256)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no live progress line")
    return parser


async def _run_levels(args: argparse.Namespace, documents: list[Document]) -> list[LevelResult]:
    deadline = time.monotonic() + args.max_time_s
    api: Api = args.api
    requests = args.requests if args.requests is not None or args.duration_s else 100
    closed = args.rate is None
    levels: list[int] | list[float] = (args.concurrency or [1]) if closed else args.rate
    results: list[LevelResult] = []
    for level in levels:
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            print(f"skipped level {level}: --max-time-s spent", file=sys.stderr)
            continue
        result = await run_level(
            args.url,
            api,
            documents,
            concurrency=int(level) if closed else None,
            rate=None if closed else float(level),
            requests=requests,
            duration_s=args.duration_s,
            warmup=args.warmup,
            timeout_s=args.timeout_s,
            seed=args.seed,
            max_outstanding=args.max_outstanding,
            max_time_s=remaining_s,
            progress=not args.no_progress,
        )
        results.append(result)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ocr-loadtest``; returns 0, or 1 when no request succeeded (reports are written)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    try:
        documents = load_documents(args.inputs)
    except ValueError as err:
        parser.error(str(err))
    results = asyncio.run(_run_levels(args, documents))
    command = sys.argv if argv is None else ["ocr-loadtest", *argv]
    written = write_reports(results, args.out, command=command)
    print(markdown_table(results), end="")
    print("wrote " + ", ".join(str(path) for path in written), file=sys.stderr)
    if not any(result.successes for result in results):
        print("no request succeeded", file=sys.stderr)
        return 1
    return 0
