"""`make bench`'s precision check: is OpenVINO's text under bf16 within 0.1 CER points of f32's?

`engine.openvino_precision = "auto"` takes bf16 on CPUs that compute in it, for the models whose
accuracy under bf16 was checked (`models.openvino_precision.BF16_CHECKED_MODELS`); this is that
check, on the bench's pages: the in-process engine once at each precision, each page's CER against
its PDF text layer. Where the CPU has no bf16 there is nothing to compare (OpenVINO would run f32
either way), and the report says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from loadtest.accuracy import pages_cer
from models.base import PredictorError
from models.onnx_predictor import import_engine
from models.openvino_precision import BF16_MAX_CER_LOSS, has_bf16


def cpu_capabilities() -> list[str]:
    """OpenVINO's CPU `OPTIMIZATION_CAPABILITIES` on this machine ("BF16" among them where it
    computes in bf16); empty where OpenVINO is not installed."""
    try:
        openvino = import_engine("openvino", "openvino")
    except PredictorError:
        return []
    return list(openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def _engine_run(out: Path, precision: str, pages_dir: Path, threads: int) -> dict[str, Any]:
    config = out / f"engine-{precision}.toml"
    config.write_text(
        f'[engine]\ncpu_backend = "openvino"\ncpu_threads = {threads}\n'
        f'openvino_precision = "{precision}"\n'
    )
    result = out / f"engine-{precision}.json"
    command = [sys.executable, "-m", "loadtest.engine_limit", "--config", str(config)]
    subprocess.run([*command, "--pages-dir", str(pages_dir), "--json", str(result)], check=True)
    data: dict[str, Any] = json.loads(result.read_text())
    return data


def check(out: Path, pages_dir: Path, truths: dict[str, str], threads: int) -> dict[str, Any]:
    """The precision check's report: the CPU's capabilities and, where it has bf16, each
    precision's CER and pages/s and whether bf16 is within `BF16_MAX_CER_LOSS` of f32."""
    capabilities = cpu_capabilities()
    report: dict[str, Any] = {"capabilities": capabilities, "cpu_bf16": has_bf16(capabilities)}
    if not report["cpu_bf16"]:
        return report
    runs = {}
    for precision in ("f32", "bf16"):
        run = _engine_run(out, precision, pages_dir, threads)
        runs[precision] = {
            "cer": pages_cer(truths, run["texts"]),
            "pages_per_s": run["pages_per_s"],
        }
    report["runs"] = runs
    report["bf16_within"] = runs["bf16"]["cer"] - runs["f32"]["cer"] <= BF16_MAX_CER_LOSS
    return report


def markdown_line(report: dict[str, Any]) -> str:
    """The report's line in the bench summary."""
    caps = " ".join(report["capabilities"]) or "none"
    if not report["cpu_bf16"]:
        return (
            f"- OpenVINO precision: this CPU has no bf16 (capabilities: {caps}), so "
            '`openvino_precision = "auto"` runs f32 here; the bf16 accuracy check needs a CPU '
            "with bf16"
        )
    f32, bf16 = report["runs"]["f32"], report["runs"]["bf16"]
    loss = (bf16["cer"] - f32["cer"]) * 100
    verdict = "within" if report["bf16_within"] else "NOT within"
    return (
        f"- OpenVINO precision (in process): f32 CER {f32['cer']:.4f} at "
        f"{f32['pages_per_s']:.3f} pages/s, bf16 CER {bf16['cer']:.4f} at "
        f"{bf16['pages_per_s']:.3f} pages/s: bf16 {loss:+.2f} CER points, {verdict} "
        f"{BF16_MAX_CER_LOSS * 100:.1f}"
    )
