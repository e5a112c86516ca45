"""`make bench`: the choice of the default model set, shown in one run on the same pages and CPU.

Rows, each counted in correct pages/s (a page counts only where its answer has the text the
same system gives that page alone; a failed request counts nothing):

- ours: our server on the default config (`config.toml`), one server per `--precision` (auto,
  and f32 forced: a CPU without bf16), each serving every set in `--sets` (the default set,
  which reads requests naming no `lang` or `model`, and PP-OCRv5 mobile by `?model=`); closed
  loop at each of `--levels`;
- rapidocr: RapidOCR's API server (`rapidocr_api` under Uvicorn, `--rapidocr-workers` workers
  x `--rapidocr-threads` threads, OpenVINO at its own precision and at f32) on the same
  PP-OCRv6 small ONNX models with our detection settings, from `--rapidocr-venv` (`make
  rapidocr-venv`);
- faster-paddle: faster-paddle 1.0.4's `OcrEngine(model_size, threads).ocr_batch` in process
  (`loadtest.bench.faster_paddle_peer`), its small and tiny models a row each: pages alone
  stand in the c=1 column, `ocr_batch` of 4 in the c=4 column.

Pages (`--pages`, spread over `--kinds`): Debian's English and Chinese manuals, poor scans of
them (skewed, blurred, noisy, JPEG 55), and maint-guide in French, German and Spanish; each
row's CER, merged words and word F1 per kind are of its answers to the pages alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, ClassVar

from loadtest.bench import faster_paddle_peer
from loadtest.bench.choice_report import markdown, plots
from loadtest.bench.common import (
    KINDS,
    Page,
    ServerRun,
    kind_pages,
    level_dict,
    measure_server,
    package_version,
    served_models,
    text_scores,
    worker_precisions,
    write_pages,
)
from loadtest.bench.options import comma_list, count
from loadtest.bench.results import Results
from loadtest.bench.scenario import Scenario, register
from loadtest.documents import Document, load_documents
from loadtest.onnx_export import export
from loadtest.servers import OURS_CPU_TOML, rapidocr_params, start_ours, start_rapidocr
from serving.config import AppConfig, ModelsConfig
from serving.cpus import available_cpus
from serving.model_sets import ModelSet, load_sets
from serving.request_options import ocr_options

OURS_CONFIG = (
    OURS_CPU_TOML
    + """[jobs]
data_dir = "{jobs_dir}"
[engine]
openvino_precision = "{precision}"
"""
)
DEFAULT_KINDS = ("en", "zh", "degraded", "fr", "de", "es")
V6_SMALL = "PP-OCRv6_small"
V5_MOBILE = "PP-OCRv5_mobile"
RAPIDOCR_PRECISIONS = {"auto": None, "f32": "f32", "bf16": "bf16"}
"""--precision -> RapidOCR's OpenVINO hint (None: OpenVINO chooses, as its users get)."""


@register
class Choice(Scenario):
    """The default set against PP-OCRv5 mobile, faster-paddle and RapidOCR's API server."""

    name = "choice"
    help = "make bench: the default model set against PP-OCRv5 mobile, RapidOCR, faster-paddle"
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
    defaults: ClassVar[dict[str, Any]] = {"pages": 24, "precision": ["auto", "f32"]}
    servers = ("ours", "rapidocr", "faster-paddle")
    precisions = ("auto", "f32", "bf16")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument(
            "--kinds",
            type=comma_list(KINDS),
            default=list(DEFAULT_KINDS),
            help=f"kinds of page, the pages spread over them (default {','.join(DEFAULT_KINDS)})",
        )
        parser.add_argument(
            "--sets",
            type=lambda s: [x for x in s.split(",") if x],
            default=[V6_SMALL, V5_MOBILE],
            help="our model sets to read with, besides the default set (default "
            f"{V6_SMALL},{V5_MOBILE})",
        )
        parser.add_argument(
            "--rapidocr-venv",
            type=Path,
            default=Path(".venv-rapidocr"),
            help="RapidOCR's venv (`make rapidocr-venv`; default .venv-rapidocr)",
        )
        parser.add_argument("--rapidocr-set", default=V6_SMALL, help="its models: our set's")
        parser.add_argument(
            "--rapidocr-workers", type=count(1), default=2, help="its Uvicorn workers (default 2)"
        )
        parser.add_argument(
            "--rapidocr-threads", type=count(1), default=1, help="threads a worker (default 1)"
        )
        parser.add_argument(
            "--faster-paddle",
            type=comma_list(faster_paddle_peer.MODEL_SIZES),
            default=list(faster_paddle_peer.MODEL_SIZES),
            help="faster-paddle's models, a row each (default small,tiny)",
        )

    def run(self, args: argparse.Namespace) -> Results:
        """Every row on the same pages; the tables and ratios."""
        pages = kind_pages(args.pages, args.kinds, args.dpi)
        paths = write_pages(pages, args.out / "pages")
        documents = load_documents(paths)
        rows: list[dict[str, Any]] = []
        if "ours" in args.servers:
            for precision in args.precision:
                rows += _ours(args, precision, pages, documents)
        if "rapidocr" in args.servers:
            for precision in args.precision:
                rows.append(_rapidocr(args, precision, pages, documents))
        if "faster-paddle" in args.servers:
            threads = args.threads or available_cpus()
            for size in args.faster_paddle:
                rows.append(_faster_paddle(size, threads, pages, paths))
        data = {
            "pages": [{"file": p.file_name, "kind": p.kind} for p in pages],
            "levels": args.levels,
            "rows": rows,
        }
        return Results(
            data=data,
            markdown=markdown(data),
            plots=plots(rows),
            failed=any("error" in row for row in rows),
        )


def _set_rows(models: dict[str, Any], wanted: list[str]) -> list[tuple[str, dict[str, str] | None]]:
    """(set name, query) of each set to read with: the default set without a query, then each
    wanted set served by name."""
    default = str(models["default"])
    served = {m["name"] for m in models["models"]}
    missing = [name for name in wanted if name not in served]
    if missing:
        raise ValueError(f"sets {missing} are not served; the server has {sorted(served)}")
    rows: list[tuple[str, dict[str, str] | None]] = [(default, None)]
    rows += [(name, {"model": name}) for name in wanted if name != default]
    return rows


def _level_rows(run: ServerRun) -> dict[str, dict[str, Any]]:
    return {
        str(level.concurrency): {
            **{k: v for k, v in level_dict(level).items() if k in LEVEL_KEYS},
            "failed": level.error_count,
            "core_s_a_page": cost,
        }
        for level, cost in zip(run.levels, run.core_s_a_page, strict=True)
    }


LEVEL_KEYS = ("requests", "throughput_pages_s", "correct_pages_s", "changed", "errors", "p50_s")


def _ours(
    args: argparse.Namespace, precision: str, pages: list[Page], documents: list[Document]
) -> list[dict[str, Any]]:
    """Our server at `precision`: a row per model set."""
    folder = args.out / f"ours-{precision}"
    folder.mkdir(parents=True, exist_ok=True)
    config = OURS_CONFIG.format(jobs_dir=folder / "jobs", precision=precision)
    if args.threads:
        config += f"cpu_threads = {args.threads}\n"
    print(f"our server, openvino_precision = {precision!r}...", file=sys.stderr)
    server = start_ours(folder, config)
    rows = []
    try:
        server.wait_ready("/readyz")
        models = served_models(server.url)
        workers = worker_precisions(server.url)
        for name, query in _set_rows(models, args.sets):
            print(f"  set {name}...", file=sys.stderr)
            run = measure_server(
                server,
                "v1",
                documents,
                args.levels,
                requests=args.requests,
                max_time_s=args.max_time_s,
                query=query,
            )
            used = [
                d.get("precision")
                for m in models["models"]
                if m["name"] == name
                for d in m["devices"]
            ]
            rows.append(
                {
                    "system": "ours",
                    "label": f"ours, {name}" + (" (default set)" if query is None else ""),
                    "set": name,
                    "default_set": query is None,
                    "precision": precision,
                    "precision_used": sorted({str(u) for u in used}),
                    "workers": workers,
                    "levels": _level_rows(run),
                    "scores": text_scores(pages, run.reference),
                }
            )
        for row in rows:
            row["peak_rss_mib"] = round(server.memory.peak_bytes / 2**20)
    finally:
        server.stop()
    return rows


def _set_named(name: str) -> ModelSet:
    sets = load_sets(ModelsConfig())
    for model_set in sets.all:
        if model_set.name == name:
            return model_set
    raise ValueError(f"no model set {name!r} in the default config: {[s.name for s in sets.all]}")


def _rapidocr(
    args: argparse.Namespace, precision: str, pages: list[Page], documents: list[Document]
) -> dict[str, Any]:
    """RapidOCR's API server on OpenVINO at `precision`, on our set's ONNX models."""
    venv: Path = args.rapidocr_venv
    label = (
        f"RapidOCR API ({args.rapidocr_workers} workers x {args.rapidocr_threads} "
        f"thread{'' if args.rapidocr_threads == 1 else 's'}, OpenVINO), {args.rapidocr_set}"
    )
    row: dict[str, Any] = {"system": "rapidocr", "label": label, "precision": precision}
    if not (venv / "bin" / "python").is_file():
        return {**row, "error": f"no {venv} (make rapidocr-venv)"}
    if precision not in RAPIDOCR_PRECISIONS:
        return {**row, "error": f"RapidOCR has no {precision} here"}
    folder = args.out / f"rapidocr-{precision}"
    folder.mkdir(parents=True, exist_ok=True)
    model_set = _set_named(args.rapidocr_set)
    models = export(venv, model_set.bundle.det, model_set.bundle.rec, folder)
    options = ocr_options(model_set.bundle, AppConfig().pipeline)
    params = rapidocr_params(options, models, args.rapidocr_threads, "openvino")
    print(f"RapidOCR's API server, OpenVINO {precision}...", file=sys.stderr)
    server = start_rapidocr(
        folder,
        venv,
        params,
        "rapidocr",
        RAPIDOCR_PRECISIONS[precision],
        workers=args.rapidocr_workers,
    )
    try:
        server.wait_ready("/")
        run = measure_server(
            server,
            "rapidocr",
            documents,
            args.levels,
            requests=args.requests,
            max_time_s=args.max_time_s,
        )
    finally:
        server.stop()
    return {
        **row,
        "versions": {p: package_version(venv, p) for p in ("rapidocr", "rapidocr_api", "openvino")},
        "levels": _level_rows(run),
        "scores": text_scores(pages, run.reference),
        "peak_rss_mib": round(server.memory.peak_bytes / 2**20),
    }


def _faster_paddle(size: str, threads: int, pages: list[Page], paths: list[Path]) -> dict[str, Any]:
    """faster-paddle's `size` model in process: pages alone as c=1, `ocr_batch` as c=4."""
    label = f"faster-paddle {size} (in process, {threads} threads)"
    row: dict[str, Any] = {"system": "faster-paddle", "label": label, "precision": "f32"}
    if not faster_paddle_peer.installed():
        return {**row, "error": f"not installed ({faster_paddle_peer.PACKAGE}: the bench extra)"}
    print(f"faster-paddle {size}...", file=sys.stderr)
    got = faster_paddle_peer.measure(size, threads, paths)
    pages_n = len(paths)
    return {
        **row,
        "version": got["version"],
        "config": got["config"],
        "levels": {
            "1": {
                "throughput_pages_s": got["alone_pages_s"],
                "correct_pages_s": got["alone_pages_s"],
                "requests": pages_n,
                "failed": 0,
                "changed": 0,
                "core_s_a_page": got["alone_core_s_a_page"],
            },
            "4": {
                "throughput_pages_s": got["batch_pages_s"],
                "correct_pages_s": got["batch_correct_pages_s"],
                "requests": pages_n,
                "failed": 0,
                "changed": got["batch_changed"],
                "core_s_a_page": got["batch_core_s_a_page"],
            },
        },
        "scores": text_scores(pages, got["texts"]),
    }
