"""The CPU engines side by side in one run: each one's in-process engine limit, its text against
Paddle's, and our server's throughput with it as the CPU device workers' backend.

    ocr-bench engines            # or: make bench-engines

Same pages as `make bench` (real document pages rendered at 150 dpi), same models (the ONNX
engines read the cached conversions `make convert` makes), same threads. Engine limits are
interleaved: each page goes to every engine in turn (one process each, one at work at a time),
so that load from elsewhere on the machine falls on all of them alike. Then our server runs
with each engine as its CPU backend, one after another, at each of `--levels`.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, ClassVar

import cv2

from loadtest.accuracy import pages_cer
from loadtest.bench.common import real_pages, write_pages
from loadtest.bench.options import comma_list, count
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.documents import load_documents
from loadtest.run import run_level
from loadtest.servers import OURS_CPU_TOML, start_ours
from serving.config import AppConfig, build
from serving.cpus import available_cpus
from serving.engine.local import LocalEngine


@dataclass(frozen=True, slots=True)
class Variant:
    """One engine configuration: a backend and its extra `[engine]` keys."""

    name: str
    backend: str
    engine_toml: str = ""


VARIANTS = {
    "paddle": Variant("paddle", "paddle"),
    "onnxruntime": Variant("onnxruntime", "onnxruntime"),
    "openvino": Variant("openvino", "openvino", 'openvino_precision = "f32"\n'),
    "openvino-bf16": Variant("openvino-bf16", "openvino", 'openvino_precision = "bf16"\n'),
}

SERVER_CONFIG = (
    OURS_CPU_TOML
    + """[jobs]
data_dir = "{jobs_dir}"
[engine]
cpu_backend = "{backend}"
cpu_threads = {threads}
{engine_toml}"""
)


def engine_config(variant: Variant, threads: int) -> AppConfig:
    """The configuration of one variant's in-process engine."""
    return build(AppConfig, tomllib.loads(engine_toml(variant, threads)))


def engine_toml(variant: Variant, threads: int) -> str:
    """The `[engine]` section of one variant."""
    return (
        f'[engine]\ncpu_backend = "{variant.backend}"\ncpu_threads = {threads}\n'
        f"{variant.engine_toml}"
    )


def _engine_process(variant: Variant, threads: int, pages: list[Path], conn: Connection) -> None:
    """One variant's engine in its own process: OCRs the page it is sent, answers the time."""
    engine = LocalEngine(engine_config(variant, threads))
    engine.load()
    images = [cv2.imread(str(path), cv2.IMREAD_COLOR) for path in pages]
    engine.ocr(images[0])  # warm-up
    conn.send("ready")
    while (index := conn.recv()) is not None:
        started = time.perf_counter()
        lines = engine.ocr(images[index]).lines
        conn.send((time.perf_counter() - started, [line.text for line in lines]))


def engine_limits(
    variants: Sequence[Variant], threads: int, pages: list[Path], rounds: int
) -> dict[str, dict[str, Any]]:
    """Every variant's in-process engine limit, interleaved: each page goes to every engine in
    turn (one process each, one at work at a time), so that load from elsewhere on the machine
    falls on all of them alike. Returns pages/s, page times and the first round's texts."""
    context = multiprocessing.get_context("spawn")
    workers = {}
    for variant in variants:
        parent, child = context.Pipe()
        process = context.Process(
            target=_engine_process, args=(variant, threads, pages, child), daemon=True
        )
        process.start()
        workers[variant.name] = (process, parent)
    try:
        for _, conn in workers.values():
            conn.recv()
        times: dict[str, list[float]] = {name: [] for name in workers}
        texts: dict[str, dict[str, list[str]]] = {name: {} for name in workers}
        order = list(workers)
        for round_ in range(rounds):
            for index, page in enumerate(pages):
                print(f"  round {round_ + 1} page {page.name}", file=sys.stderr)
                for name in order:
                    conn = workers[name][1]
                    conn.send(index)
                    elapsed, lines = conn.recv()
                    times[name].append(elapsed)
                    texts[name].setdefault(page.name, lines)
                order = order[1:] + order[:1]  # no engine always goes first
    finally:
        for process, conn in workers.values():
            conn.send(None)
            process.join(timeout=60)
    return {
        name: {
            "pages_per_s": round(len(times[name]) / sum(times[name]), 4),
            "median_page_s": round(statistics.median(times[name]), 3),
            "page_s": [round(t, 3) for t in times[name]],
            "texts": texts[name],
        }
        for name in workers
    }


def line_diffs(texts: dict[str, list[str]], reference: dict[str, list[str]]) -> dict[str, Any]:
    """How many lines differ from the reference's, page by page, with the first few."""
    differing = 0
    examples = []
    for page, lines in reference.items():
        other = texts.get(page, [])
        pairs = list(zip(lines, other, strict=False))
        bad = [(a, b) for a, b in pairs if a != b]
        differing += len(bad) + abs(len(lines) - len(other))
        examples += [f"{page}: {a!r} -> {b!r}" for a, b in bad[:3]]
    total = sum(len(lines) for lines in reference.values())
    return {"lines": total, "differing": differing, "examples": examples[:8]}


def server_level(
    variant: Variant, threads: int, paths: list[Path], out: Path, concurrency: int, requests: int
) -> dict[str, Any]:
    """Our server with `variant` as the CPU backend, at one concurrency."""
    folder = out / f"server-{variant.name}"
    folder.mkdir(parents=True, exist_ok=True)
    config = SERVER_CONFIG.format(
        jobs_dir=folder / "jobs",
        backend=variant.backend,
        threads=threads,
        engine_toml=variant.engine_toml,
    )
    server = start_ours(folder, config)
    try:
        server.wait_ready("/readyz")
        level = asyncio.run(
            run_level(
                server.url,
                "v1",
                load_documents(paths),
                concurrency=concurrency,
                requests=requests,
                warmup=min(concurrency, 2),
                timeout_s=600,
            )
        )
    finally:
        server.stop()
    return {
        "concurrency": concurrency,
        "pages_s": level.throughput_pages_s,
        "p50_s": level.p50_s,
        "p95_s": level.p95_s,
        "errors": sum(level.errors.values()),
        "peak_rss_mb": round(server.memory.peak_bytes / 2**20),
    }


@register
class Engines(Scenario):
    """The CPU engines side by side: engine limits, text against Paddle's, our server on each."""

    name = "engines"
    help = "make bench-engines: the CPU engines' limits, text against Paddle's, our server on each"
    shared = ("out", "pages", "dpi", "threads", "servers", "repeats", "levels", "requests")
    defaults: ClassVar[dict[str, Any]] = {
        "repeats": 2,
        "levels": [4],
        "servers": ["paddle", "onnxruntime", "openvino"],
    }
    servers = tuple(VARIANTS)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options: which engines, and the server's threads."""
        parser.add_argument(
            "--engines",
            type=comma_list(tuple(VARIANTS)),
            default=["paddle", "onnxruntime", "openvino"],
            help="engine limits of these, interleaved (default paddle,onnxruntime,openvino); "
            "--servers: the ones our server also runs on",
        )
        parser.add_argument(
            "--server-threads",
            type=count(0),
            default=0,
            help="the server's [engine] cpu_threads; 0 = its own rule",
        )

    def run(self, args: argparse.Namespace) -> Results:
        """Engine limits, then the servers; the table."""
        report = measure(args)
        limits = {name: row["engine_limit_pages_s"] for name, row in report["engines"].items()}
        return Results(
            data=report,
            markdown=markdown(report),
            plots={"engine_limits": bars("Engine limit (in process)", "pages/s", limits)},
        )


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Everything measured, as one JSON-able dict."""
    out: Path = args.out
    threads = args.threads or available_cpus()
    variants = [VARIANTS[name] for name in args.engines]
    pages = real_pages(args.pages, args.dpi)
    paths = write_pages(pages, out / "pages")
    truths = {page.file_name: page.truth for page in pages}
    report: dict[str, Any] = {
        "pages": [p.name for p in paths],
        "cpu_threads": threads,
        "engines": {},
    }
    limits = engine_limits(variants, threads, paths, args.repeats)
    reference = limits["paddle"]["texts"] if "paddle" in limits else None
    for variant in variants:
        limit = limits[variant.name]
        row: dict[str, Any] = {
            "engine_limit_pages_s": limit["pages_per_s"],
            "median_page_s": limit["median_page_s"],
            "page_s": limit["page_s"],
            "cer": round(pages_cer(truths, limit["texts"]), 5),
        }
        if reference is not None:
            row["vs_paddle"] = line_diffs(limit["texts"], reference)
        report["engines"][variant.name] = row
    for variant in variants:
        if variant.name not in args.servers:
            continue
        for concurrency in args.levels:
            print(f"our server on {variant.name}, c={concurrency}...", file=sys.stderr)
            requests = args.requests or 2 * len(paths)
            report["engines"][variant.name].setdefault("server", []).append(
                server_level(variant, args.server_threads, paths, out, concurrency, requests)
            )
    return report


def markdown(report: dict[str, Any]) -> str:
    """The side-by-side table."""
    rows = [
        "| engine | engine limit pages/s | x Paddle | server pages/s | server x Paddle "
        "| lines differing from Paddle | CER |",
        "|---|---|---|---|---|---|---|",
    ]
    engines = report["engines"]
    base = engines.get("paddle", {})
    base_limit = base.get("engine_limit_pages_s")
    base_servers = {lv["concurrency"]: lv["pages_s"] for lv in base.get("server", [])}
    for name, row in engines.items():
        limit = row["engine_limit_pages_s"]
        servers = row.get("server", [])
        diff = row.get("vs_paddle")
        cells = [name, f"{limit:.3f}", f"{limit / base_limit:.2f}" if base_limit else ""]
        cells.append(", ".join(f"c={lv['concurrency']} {lv['pages_s']:.3f}" for lv in servers))
        cells.append(
            ", ".join(
                f"{lv['pages_s'] / base_servers[lv['concurrency']]:.2f}"
                for lv in servers
                if base_servers.get(lv["concurrency"])
            )
        )
        cells.append(f"{diff['differing']}/{diff['lines']}" if diff else "")
        cells.append(f"{row['cer']:.4f}")
        rows.append("| " + " | ".join(cells) + " |")
    notes = [f"- {len(report['pages'])} pages, {report['cpu_threads']} threads"]
    for name, row in engines.items():
        for example in row.get("vs_paddle", {}).get("examples", []):
            notes.append(f"- {name}: {example}")
    return "\n".join(rows) + "\n\n" + "\n".join(notes) + "\n"
