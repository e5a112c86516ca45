"""`make bench`: the offline engine limit, our server and PaddleX basic serving, side by side.

One run, one page set (real document pages rendered at 150 dpi from the Debian doc PDFs), the
same models, detection settings and CPU threads for all three; servers on loopback only, started
and stopped here. Prints a Markdown table of throughput, latency, accuracy and peak memory, with
the ratios the targets are stated in, and writes results.json and results.md under --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from loadtest import onnx_export
from loadtest.accuracy import pages_cer
from loadtest.bench import batching, job_impact, languages, precision_check
from loadtest.client import Api, prepare_request, response_texts
from loadtest.documents import Document, load_documents
from loadtest.engine_limit import real_page_set, write_page_set
from loadtest.report import save_report
from loadtest.result import LevelResult
from loadtest.run import run_level
from loadtest.servers import (
    OURS_CPU_TOML,
    RAPIDOCR_ENGINES,
    ServerProcess,
    rapidocr_params,
    start_ours,
    start_paddlex,
    start_rapidocr,
)
from models.bundle import load_bundle
from models.convert import find_onnx
from models.embedded import embedded_model_dir
from models.paddle_predictor import onednn_fails_on_det
from models.quantize import find_int8
from serving.config import AppConfig, WorkersConfig
from serving.cpus import available_cpus
from serving.request_options import ocr_options

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


async def _read_all(
    server: ServerProcess, api: Api, documents: Sequence[Document], concurrency: int
) -> dict[str, list[str]]:
    """OCR every page once, `concurrency` at a time; page name -> texts."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(client: httpx.AsyncClient, doc: Document) -> tuple[str, list[str]]:
        request = prepare_request(api, doc)
        async with semaphore:
            r = await client.post(
                f"{server.url}{request.path}", content=request.body, headers=request.headers
            )
            r.raise_for_status()
            return Path(doc.name).name, response_texts(api, r.json())

    async with httpx.AsyncClient(timeout=600) as client:
        pairs = await asyncio.gather(*(one(client, d) for d in documents))
    return dict(pairs)


def _levels(
    server: ServerProcess,
    api: Api,
    documents: Sequence[Document],
    levels: Sequence[int],
    requests: int,
    max_time_s: float,
    reference: Sequence[Sequence[str]] | None = None,
) -> list[LevelResult]:
    """Each closed-loop level; with `reference` (each document's text as the server gave it to
    a lone request) each level also counts the answers that changed text."""
    results = []
    for concurrency in levels:
        result = asyncio.run(
            run_level(
                server.url,
                api,
                documents,
                concurrency=concurrency,
                requests=requests,
                warmup=min(concurrency, 2),
                timeout_s=600,
                max_time_s=max_time_s,
                progress=True,
                reference=reference,
            )
        )
        print(
            f"  {server.name} c={concurrency}: {result.throughput_pages_s:.3f} pages/s "
            f"p50 {result.p50_s} s errors {result.errors} changed text {result.changed}",
            file=sys.stderr,
        )
        results.append(result)
    return results


def _reference(server: ServerProcess, api: Api, documents: Sequence[Document]) -> list[list[str]]:
    """Each document's text as `server` gives it to a lone request (concurrency 1): what its
    answers under load are compared with."""
    texts = asyncio.run(_read_all(server, api, documents, 1))
    return [texts[Path(doc.name).name] for doc in documents]


def _level_dict(result: LevelResult) -> dict[str, Any]:
    data = asdict(result)
    data.pop("metrics", None)
    if result.metrics:
        data["mean_batch_rows"] = {s: m.mean_batch_size for s, m in result.metrics.items()}
    return data


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark; returns everything measured."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    threads = args.cpu_threads or available_cpus()
    page_set = real_page_set(args.pages, args.dpi)
    paths = write_page_set(page_set, out / "pages")
    truths = {p.name: truth for p, (_, _, truth) in zip(paths, page_set, strict=True)}
    documents = load_documents(paths)
    requests = args.requests or 2 * len(documents)
    report: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "pages": [p.name for p in paths],
        "dpi": args.dpi,
        "cpu_threads": threads,
        "cpu_instances": args.cpu_instances,
        "cpu_count": os.cpu_count(),
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
    print("OpenVINO precision check (f32 and bf16, in process)...", file=sys.stderr)
    int8 = _int8_ready()
    report["precision_check"] = precision_check.check(
        out, out / "pages", truths, threads, int8=int8
    )
    if not args.skip_languages:
        print("turned pages and languages (in process)...", file=sys.stderr)
        report["languages"] = languages.measure(args.language_pages, threads)
    if not args.skip_batching:
        report["batching"] = batching.measure(out / "batching", page_set, documents, args)

    print("our server...", file=sys.stderr)
    ours = start_ours(
        out,
        OURS_CONFIG.format(
            cpu_workers=args.cpu_workers,
            cpu_instances=args.cpu_instances,
            # 0 lets the server split the cores among its device workers by its own rule.
            ours_threads=args.cpu_threads,
            jobs_dir=out / "jobs",
        ),
    )
    try:
        ours.wait_ready("/readyz")
        report["ours_precision"] = _worker_precisions(ours)
        reference = _reference(ours, "v1", documents)
        report["ours_levels"] = [
            _level_dict(r)
            for r in _levels(
                ours, "v1", documents, args.levels, requests, args.max_time_s, reference
            )
        ]
        concurrent = asyncio.run(_read_all(ours, "v1", documents, max(args.levels)))
        report["ours_cer"] = pages_cer(truths, concurrent)
        if not args.skip_job_impact:
            print("  /ocr beside a batch job...", file=sys.stderr)
            report["job_impact"] = job_impact.measure(
                ours,
                documents,
                paths,
                requests=requests,
                job_copies=5,
                max_time_s=args.max_time_s,
            )
        report["ours_peak_rss_mb"] = round(ours.memory.peak_bytes / 2**20)
    finally:
        ours.stop()

    for precision in args.ours_precisions:
        if precision == "int8" and not int8:
            print("ours at int8: no int8 models (make convert-int8); skipped", file=sys.stderr)
            continue
        print(f"our server at openvino_precision = {precision!r}...", file=sys.stderr)
        report.setdefault("ours_precisions", {})[precision] = _measure_ours_at(
            out, precision, documents, args, requests
        )

    default = AppConfig().engine.cpu_backend
    others = [b for b in CPU_ENGINES if b != default]
    for backend in others if args.server_engines is None else args.server_engines:
        print(f"our server on {backend}...", file=sys.stderr)
        report.setdefault("ours_engines", {})[backend] = _measure_ours_on(
            out, backend, documents, args, requests
        )

    paddlex_runs: list[tuple[str, Path | None]] = []
    if not args.skip_paddlex:
        paddlex_runs.append(("paddlex", None))
    if args.paddlex_default_venv is not None:
        paddlex_runs.append(("paddlex_default", args.paddlex_default_venv))
    for key, venv in paddlex_runs:
        print(f"PaddleX basic serving ({key})...", file=sys.stderr)
        report[key] = _measure_paddlex(out, key, venv, threads, documents, truths, args, requests)
    if args.rapidocr_venv is not None:
        for engine in args.rapidocr_engines:
            print(f"RapidOCR's API server on {engine}...", file=sys.stderr)
            key = RAPIDOCR_KEYS[engine]
            # What OpenVINO picks unhinted: bf16 where the CPU computes in it.
            chosen = "bf16" if report["precision_check"]["cpu_bf16"] else "f32"
            report[key] = _measure_rapidocr(
                out, threads, documents, truths, args, requests, engine, chosen
            )
    return report


def _engine_limit(
    out: Path, name: str, threads: int, rounds: int, truths: dict[str, str]
) -> dict[str, Any]:
    """`python -m loadtest.engine_limit` on the page set in `out / "pages"`, with `threads` CPU
    threads, its config and result written to `out / f"{name}.toml"` and `.json`; its pages/s,
    page times and CER."""
    config = out / f"{name}.toml"
    config.write_text(f"[engine]\ncpu_threads = {threads}\n")
    result = out / f"{name}.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtest.engine_limit",
            "--config",
            str(config),
            "--pages-dir",
            str(out / "pages"),
            "--json",
            str(result),
            "--rounds",
            str(rounds),
        ],
        check=True,
    )
    engine: dict[str, Any] = json.loads(result.read_text())
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


def _measure_ours_at(
    out: Path,
    precision: str,
    documents: Sequence[Document],
    args: argparse.Namespace,
    requests: int,
) -> dict[str, Any]:
    """Our server at `openvino_precision = precision`, at the baselines' levels, its answers
    under load compared with its own to lone requests."""
    folder = out / f"ours-{precision}"
    folder.mkdir(parents=True, exist_ok=True)
    config = OURS_CONFIG.format(
        cpu_workers=args.cpu_workers,
        cpu_instances=args.cpu_instances,
        ours_threads=args.cpu_threads,
        jobs_dir=folder / "jobs",
    )
    server = start_ours(folder, config + f'openvino_precision = "{precision}"\n')
    try:
        server.wait_ready("/readyz")
        precisions = _worker_precisions(server)
        reference = _reference(server, "v1", documents)
        levels = _levels(
            server, "v1", documents, args.paddlex_levels, requests, args.max_time_s, reference
        )
        return {
            "precision": precisions,
            "levels": [_level_dict(r) for r in levels],
            "peak_rss_mb": round(server.memory.peak_bytes / 2**20),
        }
    finally:
        server.stop()


def _worker_precisions(server: ServerProcess) -> dict[str, str]:
    """Each device worker's precision and why, as the server's `/readyz` says."""
    devices = httpx.get(f"{server.url}/readyz").json().get("devices", {})
    return {
        name: f"{info.get('precision')} ({info.get('precision_reason')})"
        for name, info in devices.items()
    }


CPU_ENGINES = ("openvino", "onnxruntime", "paddle")
"""The engines `make bench` runs our server on, besides the main rows."""


def _measure_ours_on(
    out: Path, backend: str, documents: Sequence[Document], args: argparse.Namespace, requests: int
) -> list[dict[str, Any]]:
    """Our server with `backend` as the CPU devices' engine, at concurrency 4."""
    folder = out / f"ours-{backend}"
    folder.mkdir(parents=True, exist_ok=True)
    config = OURS_CONFIG.format(
        cpu_workers=args.cpu_workers,
        cpu_instances=args.cpu_instances,
        ours_threads=args.cpu_threads,
        jobs_dir=folder / "jobs",
    )
    server = start_ours(folder, config + f'cpu_backend = "{backend}"\n')
    try:
        server.wait_ready("/readyz")
        levels = _levels(server, "v1", documents, [4], requests, args.max_time_s)
    finally:
        server.stop()
    return [_level_dict(r) for r in levels]


def _measure_rapidocr(
    out: Path,
    threads: int,
    documents: Sequence[Document],
    truths: dict[str, str],
    args: argparse.Namespace,
    requests: int,
    engine: str,
    openvino_default: str,
) -> dict[str, Any]:
    """RapidOCR's API server on `engine` ("onnxruntime" or "openvino"), on our models converted
    to ONNX, with our detection settings, as its users run it: as many Uvicorn workers as ours
    has device workers, the cores split among them as ours splits them, and OpenVINO at the
    precision OpenVINO chooses (bf16 where the CPU has it)."""
    venv: Path = args.rapidocr_venv
    config = AppConfig()
    bundle = load_bundle(config.models.det, config.models.rec, config.models.cls)
    models = onnx_export.export(venv, bundle.det, bundle.rec, out / "rapidocr-models")
    options = ocr_options(bundle, config.pipeline)
    facts = {
        engine: _package_version(venv, engine),
        "rapidocr": _package_version(venv, "rapidocr"),
    }
    workers = args.cpu_instances
    per_worker = args.cpu_threads or max(1, threads // workers)
    params = rapidocr_params(options, models, per_worker, engine)
    facts["workers"] = f"{workers} workers x {per_worker} threads"
    if engine == "openvino":
        facts["precision"] = f"{openvino_default}, its default"
    server = start_rapidocr(out, venv, params, RAPIDOCR_KEYS[engine], None, workers=workers)
    return _measure_baseline(server, "rapidocr", "/", facts, documents, truths, args, requests)


def _measure_paddlex(
    out: Path,
    name: str,
    venv: Path | None,
    threads: int,
    documents: Sequence[Document],
    truths: dict[str, str],
    args: argparse.Namespace,
    requests: int,
) -> dict[str, Any]:
    """One PaddleX basic serving install: its levels, CER, peak memory and Paddle version.

    On Paddle 3.3.x PaddleX's default CPU run mode (oneDNN) fails on the detector (every request
    a 500, Paddle issue 77340) and PaddleX has no way to delete the failing pass, so there it
    runs with oneDNN off ("paddle" run mode), which is what its users are left with.
    """
    paddle = _package_version(venv, "paddlepaddle")
    run_mode = "paddle" if onednn_fails_on_det(paddle) else None
    pdx = start_paddlex(
        out,
        embedded_model_dir("PP-OCRv5_mobile_det"),
        embedded_model_dir("PP-OCRv5_mobile_rec"),
        threads,
        venv=venv,
        name=name,
        run_mode=run_mode,
    )
    facts = {"paddle": paddle, "run_mode": run_mode or "mkldnn"}
    return _measure_baseline(pdx, "paddlex", "/health", facts, documents, truths, args, requests)


def _measure_baseline(
    server: ServerProcess,
    api: Api,
    ready_path: str,
    facts: dict[str, str],
    documents: Sequence[Document],
    truths: dict[str, str],
    args: argparse.Namespace,
    requests: int,
) -> dict[str, Any]:
    """A started baseline server's levels, CER and peak memory, after `facts`; stops it."""
    try:
        server.wait_ready(ready_path)
        reference = _reference(server, api, documents)
        levels = _levels(
            server, api, documents, args.paddlex_levels, requests, args.max_time_s, reference
        )
        names = [Path(doc.name).name for doc in documents]
        alone = dict(zip(names, reference, strict=True))
        return {
            **facts,
            "levels": [_level_dict(r) for r in levels],
            "cer": pages_cer(truths, alone),
            "peak_rss_mb": round(server.memory.peak_bytes / 2**20),
        }
    finally:
        server.stop()


def _package_version(venv: Path | None, package: str) -> str:
    python = str(venv / "bin" / "python") if venv is not None else sys.executable
    probe = [python, "-c", f"import importlib.metadata as m; print(m.version({package!r}))"]
    found = subprocess.run(probe, capture_output=True, text=True, check=False)
    return found.stdout.strip() or "unknown"


RAPIDOCR_KEYS = {"onnxruntime": "rapidocr", "openvino": "rapidocr_openvino"}
"""Report key of each RapidOCR engine's row."""

BASELINE_LABELS = {
    "paddlex": "PaddleX basic serving",
    "paddlex_default": "PaddleX basic serving, default install",
    "rapidocr": "RapidOCR API server",
    "rapidocr_openvino": "RapidOCR API server",
}


def _engine(run: dict[str, Any]) -> str:
    workers = f"; {run['workers']}" if "workers" in run else ""
    if "onnxruntime" in run:
        return f"ONNX Runtime {run['onnxruntime']}{workers}"
    if "openvino" in run:
        return f"OpenVINO {run['openvino']} {run.get('precision', 'f32')}{workers}"
    onednn = "oneDNN" if run.get("run_mode", "mkldnn").startswith("mkldnn") else "oneDNN off"
    return f"Paddle {run['paddle']}, {onednn}"


def _level_row(name: str, level: dict[str, Any], limit: float) -> str:
    changed = level.get("changed")
    correct = level.get("correct_pages_s")
    return (
        f"| {name} | {level['concurrency']} | {level['throughput_pages_s']:.3f} | "
        f"{level['throughput_pages_s'] / limit:.2f} | {level['p50_s'] or 0:.2f} | "
        f"{level['p95_s'] or 0:.2f} | {sum(level['errors'].values())} | "
        f"{'' if changed is None else changed} | {'' if correct is None else f'{correct:.3f}'} |"
    )


def _correct_ratio(
    label: str, ours: dict[int, dict[str, Any]], levels: list[dict[str, Any]]
) -> list[str] | None:
    """Ours at concurrency 4 against a baseline at 4, each counting only its correct pages (an
    answer with the text the same server gives that page alone), with how many of the
    baseline's requests failed or changed text; None where either side has no such count."""
    theirs = [lv for lv in levels if lv["concurrency"] == 4]
    if 4 not in ours or ours[4].get("correct_pages_s") is None or not theirs:
        return None
    other = theirs[0]
    if not other.get("correct_pages_s"):
        return None
    ratio = ours[4]["correct_pages_s"] / other["correct_pages_s"]
    raw = ours[4]["throughput_pages_s"] / other["throughput_pages_s"]
    lines = [
        f"- ours / {label} at concurrency 4, correct pages/s: {ratio:.2f}x "
        f"({ours[4]['correct_pages_s']:.3f} / {other['correct_pages_s']:.3f}; all answers: "
        f"{raw:.2f}x)"
    ]
    for lv in levels:
        failed, changed = sum(lv["errors"].values()), lv.get("changed") or 0
        if failed or changed:
            lines.append(
                f"- {label} at concurrency {lv['concurrency']}: of {lv.get('requests', '?')} "
                f"requests {failed} failed ({lv['errors']}), {changed} answered with another "
                "text than it gives the page alone"
            )
    return lines


def _baseline_ratio(
    label: str, ours: dict[int, dict[str, Any]], levels: list[dict[str, Any]]
) -> list[str]:
    """Ours at concurrency 4 against a baseline at 4, in correct pages/s where both were counted
    (`_correct_ratio`); else in pages/s, and where the baseline failed requests at 4, against its
    fastest level without errors instead, and the failures said."""
    correct = _correct_ratio(label, ours, levels)
    if correct is not None:
        return correct
    lines = [
        f"- {label} at concurrency {lv['concurrency']}: {sum(lv['errors'].values())} of "
        f"{lv.get('requests', '?')} requests failed ({lv['errors']})"
        for lv in levels
        if lv["errors"]
    ]
    clean = [lv for lv in levels if not lv["errors"] and lv["throughput_pages_s"]]
    if 4 not in ours or not clean:
        return lines
    at_4 = [lv for lv in clean if lv["concurrency"] == 4]
    other = at_4[0] if at_4 else max(clean, key=lambda lv: lv["throughput_pages_s"])
    ratio = ours[4]["throughput_pages_s"] / other["throughput_pages_s"]
    if at_4:
        return [f"- ours / {label} at concurrency 4: {ratio:.2f}x", *lines]
    return [
        f"- ours at concurrency 4 / {label} at concurrency {other['concurrency']}, its fastest "
        f"level without errors: {ratio:.2f}x",
        *lines,
    ]


def _host_line(level: dict[str, Any]) -> str:
    """The CPU side of one of our levels, per page: core-seconds by process group, and the bytes
    moved through shared memory (issue 31)."""
    host = level["host"]
    core = ", ".join(f"{group} {seconds:.3f}" for group, seconds in host["core_s"].items())
    moved = ", ".join(
        f"{key} {size / 2**20:.2f}" for key, size in host["shm_bytes"].items() if key != "total"
    )
    return (
        f"- ours at concurrency {level['concurrency']}, per page: core-s {core}; shared memory "
        f"{host['shm_bytes']['total'] / 2**20:.2f} MiB ({moved})"
    )


def _threads_label(threads: int | None) -> str:
    """The engine limit row's thread count (", 4 threads"); none where an old report has none."""
    if not threads:
        return ""
    return f", {threads} thread{'' if threads == 1 else 's'}"


def _engine_row(threads: str, engine: dict[str, Any], limit: float) -> str:
    """An in-process engine limit's row, its pages/s against the main engine limit's."""
    return (
        f"| engine limit (in process{threads}) | 1 | {engine['pages_per_s']:.3f} | "
        f"{engine['pages_per_s'] / limit:.2f} | {engine['median_page_s']:.2f} (median page) "
        "| | | | |"
    )


def _one_thread_engine(report: dict[str, Any]) -> dict[str, Any] | None:
    """The one-thread in-process engine limit: its own run, or the main one where that ran on
    one thread; None in reports from before issue 28 measured it."""
    if "engine_one_thread" in report:
        one: dict[str, Any] = report["engine_one_thread"]
        return one
    return report["engine"] if report.get("cpu_threads") == 1 else None


def markdown(report: dict[str, Any]) -> str:
    """The summary table, with ratios."""
    engine = report["engine"]
    limit = engine["pages_per_s"]
    threads: int | None = report.get("cpu_threads")
    one_thread = _one_thread_engine(report)
    rows = [
        "| system | concurrency | pages/s | x engine limit | p50 s | p95 s | errors | "
        "changed text | correct pages/s |",
        "|---|---|---|---|---|---|---|---|---|",
        _engine_row(_threads_label(threads), engine, limit),
    ]
    if "engine_one_thread" in report:
        rows.append(_engine_row(_threads_label(1), report["engine_one_thread"], limit))
    rows += [_level_row("ours", level, limit) for level in report.get("ours_levels", [])]
    for precision, run in report.get("ours_precisions", {}).items():
        name = f'ours, openvino_precision = "{precision}"'
        rows += [_level_row(name, level, limit) for level in run["levels"]]
    for backend, levels in report.get("ours_engines", {}).items():
        rows += [_level_row(f"ours, CPU engine {backend}", level, limit) for level in levels]
    baselines = {key: report[key] for key in BASELINE_LABELS if key in report}
    for key, run in baselines.items():
        label = f"{BASELINE_LABELS[key]} ({_engine(run)})"
        rows += [_level_row(label, level, limit) for level in run["levels"]]
    lines = ["\n".join(rows), ""]
    ours = {lv["concurrency"]: lv for lv in report.get("ours_levels", [])}
    for key, run in baselines.items():
        lines += _baseline_ratio(f"{BASELINE_LABELS[key]} ({_engine(run)})", ours, run["levels"])
    if 1 in ours and ours[1]["p50_s"]:
        median = f"{threads}-thread in-process" if threads else "engine"
        lines.append(
            f"- ours p50 at concurrency 1 / {median} median page time: "
            f"{ours[1]['p50_s'] / engine['median_page_s']:.2f} (goal <= 1.00)"
        )
    if 4 in ours and threads and one_thread and one_thread["pages_per_s"]:
        machine = threads * one_thread["pages_per_s"]
        lines.append(
            f"- machine limit: {threads} cores x one-thread engine limit "
            f"{one_thread['pages_per_s']:.3f} = {machine:.3f} pages/s; ours at concurrency 4 / "
            f"machine limit: {ours[4]['throughput_pages_s'] / machine:.2f} (goal >= 0.90)"
        )
    if 1 in ours and ours[1].get("mean_s") and engine.get("mean_page_s"):
        lines.append(
            f"- ours mean latency at concurrency 1 / engine mean page time: "
            f"{ours[1]['mean_s'] / engine['mean_page_s']:.2f}"
        )
    cers = [f"engine {engine['cer']:.4f}"]
    if "ours_cer" in report:
        cers.append(f"ours at concurrency {max(ours)} {report['ours_cer']:.4f}")
    cers += [
        f"{BASELINE_LABELS[key]} ({_engine(run)}) {run['cer']:.4f}"
        for key, run in baselines.items()
    ]
    lines.append(f"- CER on the page set: {', '.join(cers)}")
    lines += [_host_line(level) for level in report.get("ours_levels", []) if level.get("host")]
    if "precision_check" in report:
        lines.append(precision_check.markdown_line(report["precision_check"]))
        int8_line = precision_check.int8_line(report["precision_check"])
        if int8_line is not None:
            lines.append(int8_line)
    if "languages" in report:
        lines += languages.markdown_lines(report["languages"])
    for worker, precision in report.get("ours_precision", {}).items():
        lines.append(f"- ours, device worker {worker}: {precision}")
    impact = report.get("job_impact")
    if impact:
        alone, beside = impact["alone"], impact["with_job"]
        lines.append(
            f"- /ocr at concurrency 2: p95 {alone['p95_s'] or 0:.2f} s alone, "
            f"{beside['p95_s'] or 0:.2f} s beside a {beside['job_pages_total']}-page job "
            f"(p50 {alone['p50_s'] or 0:.2f} / {beside['p50_s'] or 0:.2f} s; the job did "
            f"{beside['job_pages_done_meanwhile']} pages meanwhile)"
        )
    peaks = [f"ours {report.get('ours_peak_rss_mb')} MiB"]
    peaks += [
        f"{BASELINE_LABELS[key]} ({_engine(run)}) {run['peak_rss_mb']} MiB"
        for key, run in baselines.items()
    ]
    lines.append(f"- peak RSS of all server processes: {', '.join(peaks)}")
    if "batching" in report:
        lines += batching.markdown(report["batching"])
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point of `make bench`."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--dpi", type=float, default=150.0)
    parser.add_argument(
        "--levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 8]
    )
    parser.add_argument(
        "--paddlex-levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4]
    )
    parser.add_argument("--requests", type=int, default=0, help="per level; default 2 x pages")
    parser.add_argument("--cpu-threads", type=int, default=0, help="0 = number of cores")
    parser.add_argument("--cpu-workers", type=int, default=0, help="ours; 0 = number of cores")
    parser.add_argument(
        "--cpu-instances",
        type=int,
        default=WorkersConfig().cpu_instances,
        help="ours: CPU device workers, sharing the threads unless --cpu-threads is given",
    )
    parser.add_argument("--max-time-s", type=float, default=900.0, help="bound per level")
    parser.add_argument("--skip-paddlex", action="store_true")
    parser.add_argument(
        "--paddlex-default-venv",
        type=Path,
        help="also measure the PaddleX in this virtual environment (`make paddlex-default-venv`: "
        "PaddleX with the Paddle that pip installs by default)",
    )
    parser.add_argument(
        "--rapidocr-venv",
        type=Path,
        help="also measure RapidOCR's API server from this virtual environment (`make "
        "rapidocr-venv`), on our models converted to ONNX; at --paddlex-levels",
    )
    parser.add_argument(
        "--rapidocr-engines",
        type=lambda s: s.split(","),
        default=list(RAPIDOCR_ENGINES),
        help="RapidOCR's engines, a row each (default: onnxruntime,openvino)",
    )
    parser.add_argument("--skip-job-impact", action="store_true")
    parser.add_argument(
        "--ours-precisions",
        type=lambda s: [x for x in s.split(",") if x],
        default=["int8", "f32"],
        help="also run our server at these openvino_precision settings, at --paddlex-levels "
        "('' = none; int8 where `make convert-int8` made the models)",
    )
    parser.add_argument(
        "--skip-languages",
        action="store_true",
        help="skip the turned-page and language check (loadtest/bench/languages.py)",
    )
    parser.add_argument(
        "--language-pages", type=int, default=4, help="pages per language, and turned pages"
    )
    parser.add_argument(
        "--skip-batching",
        action="store_true",
        help="no batching-modes rows ([engine] batching exact and bucketed: CER per language, "
        "batch histograms)",
    )
    batching.add_arguments(parser)
    parser.add_argument(
        "--server-engines",
        type=lambda s: [x for x in s.split(",") if x],
        default=None,
        help="also run our server at concurrency 4 with each of these CPU engines ('' = none; "
        "default: the CPU engines other than the configured one, which the main rows use)",
    )
    args = parser.parse_args(argv)
    report = run(args)
    save_report(args.out, "results", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
