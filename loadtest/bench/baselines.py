"""Our server against its own engine limit, the machine's limit and other servers on the same
models: PaddleX basic serving (the Paddle our engine reads with), and RapidOCR's API server on our
models converted to ONNX (ONNX Runtime and OpenVINO).

One page set (real document pages at `--dpi`), the same models (the default set), detection
settings and CPU threads for all; servers on loopback only, started and stopped here. Rows: the
in-process engine limit (`--threads`, and one thread: the machine's limit is cores x that),
ours at each of `--levels`, ours at the other `--precision`s and on the other CPU engines at
concurrency 4, each baseline at `--baseline-levels`, its answers under load checked against its
own to lone requests (correct pages/s). `--requests` 0 sends each page twice a level.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from loadtest.accuracy import pages_cer
from loadtest.bench.baseline_servers import measure_paddlex, measure_rapidocr, or_not_run
from loadtest.bench.baselines_report import RAPIDOCR_KEYS, markdown
from loadtest.bench.common import (
    engine_limit,
    level_dict,
    measure_server,
    real_pages,
    worker_precisions,
    write_pages,
)
from loadtest.bench.header import openvino_capabilities
from loadtest.bench.options import comma_list, count, positive_ints
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.documents import Document, load_documents
from loadtest.servers import (
    OURS_CPU_TOML,
    RAPIDOCR_ENGINES,
    start_ours,
)
from models.bundle import load_bundle
from models.convert import find_onnx
from models.openvino_precision import has_bf16
from models.quantize import find_int8
from serving.config import AppConfig, WorkersConfig
from serving.cpus import available_cpus

OURS_CONFIG = (
    OURS_CPU_TOML
    + """cpu_workers = {cpu_workers}
cpu_instances = {cpu_instances}
[jobs]
data_dir = "{jobs_dir}"
[engine]
cpu_threads = {ours_threads}
"""
)

CPU_ENGINES = ("openvino", "onnxruntime", "paddle")
"""The engines our server also runs on, besides the configured one the main rows use."""


@register
class Baselines(Scenario):
    """Ours against the engine limit, the machine limit, PaddleX and RapidOCR."""

    name = "baselines"
    help = "our server against its engine limit, the machine limit, PaddleX and RapidOCR"
    shared = (
        "out",
        "pages",
        "dpi",
        "threads",
        "servers",
        "precision",
        "levels",
        "requests",
        "max_time_s",
    )
    defaults: ClassVar[dict[str, Any]] = {
        "levels": [1, 4, 8],
        "precision": ["int8", "f32"],
        "servers": ["ours", "paddlex"],
    }
    servers = ("ours", "paddlex", "rapidocr")
    precisions = ("f32", "bf16", "int8")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument("--baseline-levels", type=positive_ints, default=[1, 4])
        parser.add_argument("--cpu-workers", type=count(0), default=0, help="0 = the cores")
        parser.add_argument(
            "--cpu-instances",
            type=count(1),
            default=WorkersConfig().cpu_instances,
            help="ours: CPU device workers, sharing the threads unless --threads is given",
        )
        parser.add_argument(
            "--paddlex-default-venv",
            type=Path,
            help="also the PaddleX in this venv (`make paddlex-default-venv`: the Paddle pip "
            "installs by default)",
        )
        parser.add_argument(
            "--rapidocr-venv",
            type=Path,
            default=Path(".venv-rapidocr"),
            help="RapidOCR's venv, for --servers rapidocr (`make rapidocr-venv`)",
        )
        parser.add_argument(
            "--rapidocr-engines",
            type=comma_list(RAPIDOCR_ENGINES),
            default=list(RAPIDOCR_ENGINES),
            help="RapidOCR's engines, a row each (default onnxruntime,openvino)",
        )
        parser.add_argument(
            "--server-engines",
            type=comma_list(CPU_ENGINES),
            default=None,
            help="also ours at concurrency 4 on each of these CPU engines ('' = none; default: "
            "those other than the configured one)",
        )

    def run(self, args: argparse.Namespace) -> Results:
        """Every row; the table and ratios."""
        report = measure(args)
        ours = {
            str(lv["concurrency"]): lv["throughput_pages_s"] for lv in report.get("ours_levels", [])
        }
        return Results(
            data=report,
            markdown=markdown(report),
            failed=bool(report.get("not_run")),
            plots={"ours_pages_s": bars("Ours, pages/s per level", "pages/s", ours)}
            if ours
            else {},
        )


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark; returns everything measured."""
    out: Path = args.out
    threads = args.threads or available_cpus()
    pages = real_pages(args.pages, args.dpi)
    paths = write_pages(pages, out / "pages")
    truths = {page.file_name: page.truth for page in pages}
    documents = load_documents(paths)
    requests = args.requests or 2 * len(documents)
    report: dict[str, Any] = {
        "pages": [p.name for p in paths],
        "cpu_threads": threads,
        "cpu_instances": args.cpu_instances,
    }
    # Each page as often as a level sends it, so medians cover the same pages.
    rounds = max(1, round(requests / len(documents)))
    print(f"engine limit (in process, page after page, {threads} threads)...", file=sys.stderr)
    report["engine"] = _engine_limit(out, "engine", threads, rounds, truths)
    if threads > 1:
        # Issue 28: cores x the one-thread limit is what the machine can do with one engine
        # per core, the bound ours at concurrency 4 is held to.
        print("engine limit (in process, page after page, 1 thread)...", file=sys.stderr)
        report["engine_one_thread"] = _engine_limit(out, "engine-1thread", 1, rounds, truths)
    if "ours" in args.servers:
        _measure_ours(report, args, documents, truths, requests)
    if "paddlex" in args.servers:
        print("PaddleX basic serving...", file=sys.stderr)
        or_not_run(
            report,
            "paddlex",
            lambda: measure_paddlex(
                out, "paddlex", None, threads, documents, truths, args, requests
            ),
        )
    if args.paddlex_default_venv is not None:
        print("PaddleX basic serving, default install...", file=sys.stderr)
        venv = args.paddlex_default_venv
        or_not_run(
            report,
            "paddlex_default",
            lambda: measure_paddlex(
                out, "paddlex_default", venv, threads, documents, truths, args, requests
            ),
        )
    if "rapidocr" in args.servers:
        # What OpenVINO picks unhinted: bf16 where the CPU computes in it.
        chosen = "bf16" if has_bf16(openvino_capabilities()) else "f32"
        for engine in args.rapidocr_engines:
            print(f"RapidOCR's API server on {engine}...", file=sys.stderr)
            run = partial(
                measure_rapidocr, out, threads, documents, truths, args, requests, engine, chosen
            )
            or_not_run(report, RAPIDOCR_KEYS[engine], run)
    return report


def _ours_config(args: argparse.Namespace, folder: Path) -> str:
    return OURS_CONFIG.format(
        cpu_workers=args.cpu_workers,
        cpu_instances=args.cpu_instances,
        # 0 lets the server split the cores among its device workers by its own rule.
        ours_threads=args.threads,
        jobs_dir=folder / "jobs",
    )


def _measure_ours(
    report: dict[str, Any],
    args: argparse.Namespace,
    documents: Sequence[Document],
    truths: dict[str, str],
    requests: int,
) -> None:
    """Ours on the default config at every level, then at the other precisions and engines."""
    print("our server...", file=sys.stderr)
    ours = start_ours(args.out, _ours_config(args, args.out))
    try:
        ours.wait_ready("/readyz")
        report["ours_precision"] = worker_precisions(ours.url)
        run = measure_server(
            ours, "v1", documents, args.levels, requests=requests, max_time_s=args.max_time_s
        )
        report["ours_levels"] = [level_dict(r) for r in run.levels]
        report["ours_cer"] = pages_cer(truths, run.reference)
        report["ours_peak_rss_mb"] = round(ours.memory.peak_bytes / 2**20)
    finally:
        ours.stop()
    int8 = _int8_ready()
    for precision in args.precision:
        if precision == "int8" and not int8:
            print("ours at int8: no int8 models (make convert-int8); skipped", file=sys.stderr)
            continue
        print(f"our server at openvino_precision = {precision!r}...", file=sys.stderr)
        report.setdefault("ours_precisions", {})[precision] = _measure_ours_with(
            args,
            f"ours-{precision}",
            f'openvino_precision = "{precision}"\n',
            documents,
            args.baseline_levels,
            requests,
        )
    default = AppConfig().engine.cpu_backend
    engines = args.server_engines
    for backend in [b for b in CPU_ENGINES if b != default] if engines is None else engines:
        print(f"our server on {backend}...", file=sys.stderr)
        run_ = _measure_ours_with(
            args, f"ours-{backend}", f'cpu_backend = "{backend}"\n', documents, [4], requests
        )
        report.setdefault("ours_engines", {})[backend] = run_["levels"]


def _engine_limit(
    out: Path, name: str, threads: int, rounds: int, truths: dict[str, str]
) -> dict[str, Any]:
    """The in-process engine limit with `threads` CPU threads on the pages in `out / "pages"`:
    its pages/s, page times and CER."""
    engine = engine_limit(out, name, f"[engine]\ncpu_threads = {threads}\n", out / "pages", rounds)
    engine["cer"] = pages_cer(truths, engine.pop("texts"))
    return engine


def _int8_ready() -> bool:
    """Whether the configured models have their int8 forms (`make convert-int8`)."""
    config = AppConfig()
    bundle = load_bundle(config.models.det, config.models.rec)
    cache = Path(config.engine.onnx_dir)
    for spec in (bundle.det, bundle.rec):
        found = find_onnx(spec, cache)
        if found is None or find_int8(found, cache) is None:
            return False
    return True


def _measure_ours_with(
    args: argparse.Namespace,
    name: str,
    engine_keys: str,
    documents: Sequence[Document],
    levels: Sequence[int],
    requests: int,
) -> dict[str, Any]:
    """Our server with `engine_keys` added to its `[engine]`, at `levels`, its answers under
    load compared with its own to lone requests."""
    folder = args.out / name
    folder.mkdir(parents=True, exist_ok=True)
    server = start_ours(folder, _ours_config(args, folder) + engine_keys)
    try:
        server.wait_ready("/readyz")
        precisions = worker_precisions(server.url)
        run = measure_server(
            server, "v1", documents, levels, requests=requests, max_time_s=args.max_time_s
        )
        return {
            "precision": precisions,
            "levels": [level_dict(r) for r in run.levels],
            "peak_rss_mb": round(server.memory.peak_bytes / 2**20),
        }
    finally:
        server.stop()
