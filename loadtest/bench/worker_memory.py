"""Memory against throughput of the CPU device-worker layouts (issue 28, item 4).

    python -m loadtest.bench.worker_memory --pages 8 --requests 16 --out worker-memory-out

Two device workers of one thread each hold the models twice (a process each); one worker of
two threads holds them once but runs one batch at a time. For each layout (`--layout
INSTANCESxTHREADS`, default 2x1 and 1x2) this starts `ocr-serve` on the CPU alone, reads the
idle process tree's memory, then runs a closed-loop level at `--concurrency` on real pages
(`loadtest.engine_limit.real_page_set`) while `TreeSampler` keeps the tree's peak (private
memory plus shared-memory segments, each byte once). Prints one JSON line per layout: pages/s,
p50, errors, idle and peak MiB. One process with two OpenVINO infer requests (streams) is not a
layout the server has: a device worker runs one batch at a time (`models.openvino_backend`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtest.bench.memory_peak import MIB, TreeSampler, idle_footprint
from loadtest.documents import load_documents
from loadtest.engine_limit import real_page_set, write_page_set
from loadtest.run import run_level
from loadtest.servers import OURS_CPU_TOML, start_ours


def layout_config(instances: int, threads: int, precision: str, jobs_dir: Path) -> str:
    """Our server's config: `instances` CPU device workers of `threads` threads each."""
    return (
        OURS_CPU_TOML
        + f'cpu_instances = {instances}\n[jobs]\ndata_dir = "{jobs_dir}"\n'
        + f'[engine]\ncpu_threads = {threads}\nopenvino_precision = "{precision}"\n'
    )


def parse_layout(text: str) -> tuple[int, int]:
    """`"2x1"` -> (2 device workers, 1 thread each)."""
    instances, _, threads = text.partition("x")
    return int(instances), int(threads)


def measure(
    layout: tuple[int, int], pages: Sequence[Path], args: argparse.Namespace
) -> dict[str, Any]:
    """One layout's throughput and memory at `args.concurrency`."""
    instances, threads = layout
    out: Path = args.out / f"{instances}x{threads}"
    out.mkdir(parents=True, exist_ok=True)
    server = start_ours(out, layout_config(instances, threads, args.precision, out / "jobs"))
    try:
        server.wait_ready("/readyz")
        pid = server.process.pid
        idle = idle_footprint(pid)
        started = time.monotonic()
        with TreeSampler(pid) as sampler:
            level = asyncio.run(
                run_level(
                    server.url,
                    "v1",
                    load_documents(pages),
                    concurrency=args.concurrency,
                    requests=args.requests,
                    warmup=2,
                    timeout_s=600,
                )
            )
        return {
            "layout": f"{instances} device workers x {threads} threads",
            "precision": args.precision,
            "concurrency": args.concurrency,
            "requests": level.requests,
            "errors": level.errors,
            "pages_per_s": round(level.throughput_pages_s, 3),
            "p50_s": level.p50_s and round(level.p50_s, 2),
            "seconds": round(time.monotonic() - started, 1),
            "idle_mib": round(idle / MIB),
            **sampler.peaks_mib(),
        }
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: each layout's JSON line."""
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench.worker_memory", description=__doc__
    )
    parser.add_argument("--layout", action="append", type=parse_layout)
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--precision", default="auto", help="engine.openvino_precision")
    parser.add_argument("--out", type=Path, default=Path("worker-memory-out"))
    args = parser.parse_args(argv)
    pages = write_page_set(real_page_set(args.pages), args.out / "pages")
    for layout in args.layout or [(2, 1), (1, 2)]:
        print(json.dumps(measure(layout, pages, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
