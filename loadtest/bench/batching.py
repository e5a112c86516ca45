"""`[engine] batching` exact and bucketed, side by side.

- Accuracy, in process: every bench page read in both modes by one engine (`LocalEngine`), CER
  per language. In bucketed mode a crop is padded to its width bucket whatever its companions,
  so its text does not depend on the batch it runs in, nor on the device beyond float noise:
  what is measured here on the CPU holds for a GPU. Bucketed is the GPU default ("auto") only
  while it stays within `CER_BOUND` of exact for every language (`within_bound`).
- Batches, on our server: the pages sent at each of `--levels` to a server in each mode whose CPU
  device workers take the GPU class's batch limits (a CPU device's own take one det page and 24
  rec rows a batch), to show how batches fill: det pages a batch, rec rows a batch and rec pages
  a batch, histograms from `/metrics` (`ocr_batch_size`, `ocr_batch_pages`). Throughput here
  says nothing of a GPU's.

    ocr-bench batching --pages 8
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import numpy as np

from loadtest.accuracy import pages_cer
from loadtest.bench.options import count
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.documents import Document, load_documents
from loadtest.engine_limit import real_page_set, write_page_set
from loadtest.run import run_level
from loadtest.server_metrics import format_le, parse_histograms, scrape_metrics, subtract
from loadtest.servers import OURS_CPU_TOML, start_ours
from serving.config import AppConfig, WorkersConfig
from serving.engine.local import LocalEngine
from serving.request_options import ocr_options
from serving.scheduling.batch_shapes import BatchingMode, BatchShapes

MODES: tuple[BatchingMode, ...] = ("exact", "bucketed")
CER_BOUND = 0.001
"""Bucketed mode's CER may exceed exact mode's by at most this (0.1 points), per language."""
BATCH_PAGES = "ocr_batch_pages"
BATCH_SIZE = "ocr_batch_size"

_GPU = WorkersConfig().gpu
SERVER_CONFIG = (
    OURS_CPU_TOML
    + """cpu_workers = {cpu_workers}
cpu_instances = {cpu_instances}
[workers.cpu]
det = {{ max_batch_size = {det_rows}, max_cost = {det_cost} }}
rec = {{ max_batch_size = {rec_rows}, max_cost = {rec_cost} }}
[workers.rec_queue]
max_wait_ms = {rec_wait_ms}
[jobs]
data_dir = "{jobs_dir}"
[engine]
cpu_threads = {threads}
batching = "{mode}"
"""
)


def language(label: str) -> str:
    """The bench page's language, from its PDF's name (`serving.convert.pdf_pages.REAL_PDFS`)."""
    return "zh" if "zh-cn" in label else "en"


@dataclass(frozen=True, slots=True)
class ModeTexts:
    """Each page's lines read in one mode."""

    mode: BatchingMode
    texts: dict[str, list[str]]


def read_in_process(
    engine: LocalEngine, pages: Sequence[tuple[str, np.ndarray, str]]
) -> list[ModeTexts]:
    """Every page read in each mode by `engine`."""
    shapes = BatchShapes.of("bucketed", engine.config.engine.torch)
    options = {
        mode: ocr_options(engine.bundle, engine.config.pipeline, shapes=mode_shapes)
        for mode, mode_shapes in (("exact", None), ("bucketed", shapes))
    }
    return [
        ModeTexts(
            mode,
            {
                label: [line.text for line in engine.ocr(image, options[mode]).lines]
                for label, image, _ in pages
            },
        )
        for mode in MODES
    ]


def cer_by_language(
    truths: Mapping[str, str], readings: Sequence[ModeTexts]
) -> dict[str, dict[str, float]]:
    """{mode: {language: CER}} over the pages of each language."""
    languages = sorted({language(label) for label in truths})
    return {
        r.mode: {
            lang: pages_cer({k: v for k, v in truths.items() if language(k) == lang}, r.texts)
            for lang in languages
        }
        for r in readings
    }


def within_bound(cers: Mapping[str, Mapping[str, float]]) -> bool:
    """Whether bucketed mode's CER is within `CER_BOUND` of exact's for every language."""
    exact, bucketed = cers["exact"], cers["bucketed"]
    return all(bucketed[lang] <= exact[lang] + CER_BOUND for lang in exact)


def histogram(delta: Mapping[Any, Any], name: str, stage: str) -> dict[str, int]:
    """Observations per bucket (not cumulative) of histogram `name` for `stage`, all devices."""
    cumulative: dict[float, float] = {}
    for (metric, labels), series in delta.items():
        if metric != name or dict(labels).get("stage") != stage:
            continue
        for le, value in series.buckets.items():
            cumulative[le] = cumulative.get(le, 0.0) + value
    counts: dict[str, int] = {}
    previous = 0.0
    for le in sorted(cumulative):
        if round(cumulative[le] - previous):
            counts[format_le(le)] = round(cumulative[le] - previous)
        previous = cumulative[le]
    return counts


async def _scrape(url: str) -> str:
    async with httpx.AsyncClient(base_url=url) as client:
        return await scrape_metrics(client, timeout_s=30)


def serve_mode(
    out: Path,
    mode: BatchingMode,
    documents: Sequence[Document],
    args: argparse.Namespace,
    concurrency: int,
) -> dict[str, Any]:
    """Our server in `mode` at `concurrency`: pages/s and its batch histograms."""
    folder = out / f"server-{mode}-c{concurrency}"
    folder.mkdir(parents=True, exist_ok=True)
    config = SERVER_CONFIG.format(
        cpu_workers=args.cpu_workers,
        cpu_instances=args.cpu_instances,
        det_rows=_GPU.det.max_batch_size,
        det_cost=_GPU.det.max_cost,
        rec_rows=_GPU.rec.max_batch_size,
        rec_cost=_GPU.rec.max_cost,
        rec_wait_ms=args.rec_wait_ms,
        jobs_dir=folder / "jobs",
        threads=args.threads,
        mode=mode,
    )
    server = start_ours(folder, config)
    try:
        server.wait_ready("/readyz")
        before = asyncio.run(_scrape(server.url))
        level = asyncio.run(
            run_level(
                server.url,
                "v1",
                documents,
                concurrency=concurrency,
                requests=args.requests or 2 * len(documents),
                timeout_s=600,
                max_time_s=args.max_time_s,
            )
        )
        after = asyncio.run(_scrape(server.url))
    finally:
        server.stop()
    names = (BATCH_SIZE, BATCH_PAGES)
    delta = subtract(parse_histograms(after, names), parse_histograms(before, names))
    return {
        "pages_s": level.throughput_pages_s,
        "errors": level.errors,
        "det_pages_a_batch": histogram(delta, BATCH_SIZE, "det"),
        "rec_rows_a_batch": histogram(delta, BATCH_SIZE, "rec"),
        "rec_pages_a_batch": histogram(delta, BATCH_PAGES, "rec"),
    }


def measure(
    out: Path,
    pages: Sequence[tuple[str, np.ndarray, str]],
    documents: Sequence[Document],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Both modes: CER per language in process, then each mode's server batches."""
    print("batching modes: CER per language in process...", file=sys.stderr)
    config = AppConfig()
    if args.threads:
        config = _with_threads(config, args.threads)
    engine = LocalEngine(config)
    engine.load()
    truths = {label: truth for label, _, truth in pages}
    cers = cer_by_language(truths, read_in_process(engine, pages))
    del engine
    report: dict[str, Any] = {
        "cer": cers,
        "within_bound": within_bound(cers),
        "bound_points": CER_BOUND * 100,
    }
    if not args.skip_servers:
        for mode in MODES:
            for concurrency in args.levels:
                print(f"batching modes: our server, {mode}, c={concurrency}...", file=sys.stderr)
                key = f"{mode}, c={concurrency}"
                report.setdefault("servers", {})[key] = serve_mode(
                    out, mode, documents, args, concurrency
                )
    return report


def _with_threads(config: AppConfig, threads: int) -> AppConfig:
    return dataclasses.replace(
        config, engine=dataclasses.replace(config.engine, cpu_threads=threads)
    )


def markdown(report: Mapping[str, Any]) -> list[str]:
    """The batching section of the bench's Markdown."""
    cers = report["cer"]
    languages = sorted(cers["exact"])
    lines = [
        "",
        "### Batching modes (`[engine] batching`)",
        "",
        "| mode | " + " | ".join(f"CER {lang}" for lang in languages) + " |",
        "| --- | " + " | ".join("---" for _ in languages) + " |",
    ]
    for mode in MODES:
        cells = " | ".join(f"{cers[mode][lang] * 100:.3f} %" for lang in languages)
        lines.append(f"| {mode} | {cells} |")
    verdict = "within" if report["within_bound"] else "NOT within"
    lines += [
        "",
        f"Bucketed is {verdict} {report['bound_points']:.1f} CER points of exact for every "
        "language (in process, the same engine; a GPU reads the same up to float noise).",
    ]
    servers = report.get("servers")
    if servers:
        lines += [
            "",
            "Our server at the GPU class's batch limits on its CPU device workers: batches a "
            "histogram bucket (`bucket: batches`).",
            "",
            "| mode | det pages a batch | rec rows a batch | rec pages a batch | pages/s |",
            "| --- | --- | --- | --- | --- |",
        ]
        for mode, run in servers.items():
            histograms = [
                ", ".join(f"{le}: {n}" for le, n in run[key].items()) or "-"
                for key in ("det_pages_a_batch", "rec_rows_a_batch", "rec_pages_a_batch")
            ]
            lines.append(f"| {mode} | {' | '.join(histograms)} | {run['pages_s']:.3f} |")
    return lines


@register
class Batching(Scenario):
    """Exact and bucketed batching: CER per language in process, batches on our server."""

    name = "batching"
    help = "[engine] batching exact and bucketed: CER per language, how batches fill"
    shared = ("out", "pages", "dpi", "threads", "levels", "requests", "max_time_s")
    defaults: ClassVar[dict[str, Any]] = {"levels": [8]}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument(
            "--rec-wait-ms",
            type=float,
            default=WorkersConfig().rec_queue.max_wait_ms,
            help="the servers' [workers.rec_queue] max_wait_ms",
        )
        parser.add_argument("--skip-servers", action="store_true", help="CER only, no server runs")
        parser.add_argument("--cpu-workers", type=count(0), default=0, help="0 = the cores")
        parser.add_argument("--cpu-instances", type=count(1), default=WorkersConfig().cpu_instances)

    def run(self, args: argparse.Namespace) -> Results:
        """Both modes on the bench's pages."""
        pages = real_page_set(args.pages, args.dpi)
        documents = load_documents(write_page_set(pages, args.out / "pages"))
        report = measure(args.out, pages, documents, args)
        cers = {
            f"{mode} {lang}": cer * 100
            for mode, by_lang in report["cer"].items()
            for lang, cer in by_lang.items()
        }
        return Results(
            data=report,
            markdown="\n".join(markdown(report)).strip() + "\n",
            plots={"cer": bars("CER per mode and language", "CER %", cers)},
        )
