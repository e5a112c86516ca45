"""The other servers `ocr-bench baselines` runs beside ours, on the same models and settings:
PaddleX basic serving (the Paddle our engine reads with, and as pip installs it by default) and
RapidOCR's API server on our models converted to ONNX. A baseline that cannot start or serve
keeps its reason in the report instead of ending the run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from loadtest import onnx_export
from loadtest.accuracy import pages_cer
from loadtest.bench.baselines_report import RAPIDOCR_KEYS
from loadtest.bench.common import level_dict, measure_server, package_version
from loadtest.client import Api
from loadtest.documents import Document
from loadtest.servers import ServerProcess, rapidocr_params, start_paddlex, start_rapidocr
from models.bundle import load_bundle
from models.convert import ModelConversionError
from models.embedded import embedded_model_dir
from models.paddle_predictor import onednn_fails_on_det
from serving.config import AppConfig
from serving.request_options import ocr_options

__all__ = ["measure_paddlex", "measure_rapidocr", "or_not_run"]


def or_not_run(report: dict[str, Any], key: str, measure: Callable[[], dict[str, Any]]) -> None:
    """`measure`'s row under `key`; where the baseline cannot start or serve (PaddleX without
    its serving plugin, a venv not made), its reason under "not_run" instead, so that one
    baseline that fails keeps every other row."""
    try:
        report[key] = measure()
    except (RuntimeError, TimeoutError, OSError, httpx.HTTPError, ModelConversionError) as err:
        print(f"  {key} not run: {err}", file=sys.stderr)
        report.setdefault("not_run", {})[key] = f"{type(err).__name__}: {err}"


def measure_rapidocr(
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
    facts = {engine: package_version(venv, engine), "rapidocr": package_version(venv, "rapidocr")}
    workers = args.cpu_instances
    per_worker = args.threads or max(1, threads // workers)
    params = rapidocr_params(options, models, per_worker, engine)
    facts["workers"] = f"{workers} workers x {per_worker} threads"
    if engine == "openvino":
        facts["precision"] = f"{openvino_default}, its default"
    server = start_rapidocr(out, venv, params, RAPIDOCR_KEYS[engine], None, workers=workers)
    return _measure_baseline(server, "rapidocr", "/", facts, documents, truths, args, requests)


def measure_paddlex(
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
    paddle = package_version(venv, "paddlepaddle")
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
        run = measure_server(
            server,
            api,
            documents,
            args.baseline_levels,
            requests=requests,
            max_time_s=args.max_time_s,
        )
        return {
            **facts,
            "levels": [level_dict(r) for r in run.levels],
            "cer": pages_cer(truths, run.reference),
            "peak_rss_mb": round(server.memory.peak_bytes / 2**20),
        }
    finally:
        server.stop()
