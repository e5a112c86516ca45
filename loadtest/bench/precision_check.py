"""Is OpenVINO's text under bf16 (and int8) within its bound of f32's, on this CPU?

`engine.openvino_precision = "auto"` takes bf16 for a model where the CPU computes in it and the
server's own start-up check passed it (`serving.engine.precision_check`, on its small check set);
this is the same question on the bench's pages: the in-process engine once at each precision
(bf16 and int8 unchecked, as asked: `openvino_precision_check = false`), each page's CER against
its PDF text layer. Where the CPU has no bf16 there is nothing to compare (OpenVINO would run f32
either way), and the report says so. With `int8` (where `make convert-int8` made the int8
models) int8 runs too, and is within `INT8_MAX_CER_LOSS` of f32 or not; each run's CER is also
given per language (the Chinese PDF's pages, the English ones'), as int8 may cost one more.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from loadtest.accuracy import merged_words, pages_cer
from loadtest.bench.common import real_pages, write_pages
from loadtest.bench.header import openvino_capabilities
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from models.openvino_precision import BF16_MAX_CER_LOSS, INT8_MAX_CER_LOSS, has_bf16
from serving.cpus import available_cpus

cpu_capabilities = openvino_capabilities
"""OpenVINO's CPU `OPTIMIZATION_CAPABILITIES` here (the report header's)."""


WHOLE_BF16 = "bf16-every-layer"
"""The run of whole-model bf16 (`engine.openvino_f32_head = false`), beside the served layout
(bf16, the recogniser's CTC head in f32), to show what the layout keeps (issue 41)."""


def _engine_settings(precision: str) -> str:
    if precision == WHOLE_BF16:  # every layer at bf16, the recogniser's head too
        return 'openvino_precision = "bf16"\nopenvino_f32_head = false\n'
    if precision == "int8":  # the int8 models themselves, not what the start-up check keeps
        return 'openvino_precision = "int8"\nopenvino_precision_check = false\n'
    return f'openvino_precision = "{precision}"\n'


def _engine_run(out: Path, precision: str, pages_dir: Path, threads: int) -> dict[str, Any]:
    config = out / f"engine-{precision}.toml"
    config.write_text(
        f'[engine]\ncpu_backend = "openvino"\ncpu_threads = {threads}\n'
        + _engine_settings(precision)
    )
    result = out / f"engine-{precision}.json"
    command = [sys.executable, "-m", "loadtest.engine_limit", "--config", str(config)]
    subprocess.run([*command, "--pages-dir", str(pages_dir), "--json", str(result)], check=True)
    data: dict[str, Any] = json.loads(result.read_text())
    return data


def language(page: str) -> str:
    """A bench page's language, from its name (`engine_limit.real_page_set`'s labels): "zh" for
    the Chinese PDF's pages, else "en"."""
    return "zh" if "zh-cn" in page else "en"


def cer_by_language(truths: dict[str, str], texts: dict[str, list[str]]) -> dict[str, float]:
    """CER of each language's pages together."""
    languages = sorted({language(page) for page in truths})
    return {
        lang: pages_cer({p: t for p, t in truths.items() if language(p) == lang}, texts)
        for lang in languages
    }


def merged_by_language(truths: dict[str, str], texts: dict[str, list[str]]) -> dict[str, int]:
    """Merged words (`loadtest.accuracy.merged_words`) of each language's pages together."""
    merged: dict[str, int] = {}
    for page, truth in truths.items():
        lang = language(page)
        merged[lang] = merged.get(lang, 0) + merged_words(truth, "\n".join(texts.get(page, [])))
    return dict(sorted(merged.items()))


def check(
    out: Path, pages_dir: Path, truths: dict[str, str], threads: int, *, int8: bool = False
) -> dict[str, Any]:
    """The precision check's report: the CPU's capabilities and, where it has bf16 (or `int8`
    is asked), each precision's CER (all pages, and per language) and pages/s, and whether bf16
    is within `BF16_MAX_CER_LOSS` of f32 and int8 within `INT8_MAX_CER_LOSS`."""
    capabilities = cpu_capabilities()
    report: dict[str, Any] = {"capabilities": capabilities, "cpu_bf16": has_bf16(capabilities)}
    precisions = ["f32"] + ["auto", "bf16", WHOLE_BF16] * report["cpu_bf16"] + ["int8"] * int8
    if len(precisions) == 1:
        return report
    runs = {}
    for precision in precisions:
        run = _engine_run(out, precision, pages_dir, threads)
        runs[precision] = {
            "cer": pages_cer(truths, run["texts"]),
            "cer_by_language": cer_by_language(truths, run["texts"]),
            "merged_by_language": merged_by_language(truths, run["texts"]),
            "pages_per_s": run["pages_per_s"],
        }
    report["runs"] = runs
    if "bf16" in runs:
        report["bf16_within"] = _within(runs["bf16"], runs["f32"], BF16_MAX_CER_LOSS)
    if "auto" in runs:
        report["auto_within"] = _within(runs["auto"], runs["f32"], BF16_MAX_CER_LOSS)
    if "int8" in runs:
        report["int8_within"] = _within(runs["int8"], runs["f32"], INT8_MAX_CER_LOSS)
    return report


def _within(run: dict[str, Any], f32: dict[str, Any], max_loss: float) -> bool:
    """CER within `max_loss` of f32's in every language, and no more merged words than f32."""
    return all(
        run["cer_by_language"][lang] - cer <= max_loss
        and run["merged_by_language"].get(lang, 0) <= f32["merged_by_language"].get(lang, 0)
        for lang, cer in f32["cer_by_language"].items()
    )


def _run_text(name: str, run: dict[str, Any]) -> str:
    merged = run.get("merged_by_language", {})
    languages = ", ".join(
        f"{lang} {cer:.4f}" + (f" ({merged[lang]} merged words)" if lang in merged else "")
        for lang, cer in run["cer_by_language"].items()
    )
    return f"{name} CER {run['cer']:.4f} ({languages}) at {run['pages_per_s']:.3f} pages/s"


def int8_line(report: dict[str, Any]) -> str | None:
    """The int8 line in the bench summary, where int8 ran."""
    runs = report.get("runs", {})
    if "int8" not in runs:
        return None
    f32, int8 = runs["f32"], runs["int8"]
    loss = (int8["cer"] - f32["cer"]) * 100
    verdict = "within" if report["int8_within"] else "NOT within"
    return (
        f"- OpenVINO int8 (in process, NNCF): {_run_text('f32', f32)}, "
        f"{_run_text('int8', int8)}: int8 {loss:+.2f} CER points, {verdict} "
        f"{INT8_MAX_CER_LOSS * 100:.1f}; {int8['pages_per_s'] / f32['pages_per_s']:.2f}x f32"
    )


def markdown_line(report: dict[str, Any]) -> str:
    """The report's bf16 line in the bench summary."""
    caps = " ".join(report["capabilities"]) or "none"
    if not report["cpu_bf16"]:
        return (
            f"- OpenVINO precision: this CPU has no bf16 (capabilities: {caps}), so "
            '`openvino_precision = "auto"` runs f32 here; the bf16 accuracy check needs a CPU '
            "with bf16"
        )
    runs = report["runs"]
    f32 = runs["f32"]
    rows = [_run_text("f32", f32)]
    verdicts = []
    for name, label, within in (
        ("auto", "auto (served: bf16 where checked)", "auto_within"),
        ("bf16", "bf16 (CTC head f32)", "bf16_within"),
        (WHOLE_BF16, "bf16 every layer", None),
    ):
        if name not in runs:
            continue
        rows.append(_run_text(label, runs[name]))
        if within is not None and within in report:
            verdict = "within" if report[within] else "NOT within"
            speed = runs[name]["pages_per_s"] / f32["pages_per_s"]
            verdicts.append(f"{name} {verdict}, {speed:.2f}x f32")
    return (
        f"- OpenVINO precision (in process): {'; '.join(rows)}. Against f32 (CER within "
        f"{BF16_MAX_CER_LOSS * 100:.1f} points per language, no more merged words): "
        + "; ".join(verdicts)
    )


@register
class PrecisionCheck(Scenario):
    """f32 against auto, bf16 and (with --int8) int8, in process, on the bench's pages."""

    name = "precision"
    help = "OpenVINO's text at auto, bf16 (and int8) against f32, in process, per language"
    shared = ("out", "pages", "dpi", "threads")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own option."""
        parser.add_argument("--int8", action="store_true", help="int8 too (make convert-int8)")

    def run(self, args: argparse.Namespace) -> Results:
        """Each precision in turn."""
        pages = real_pages(args.pages, args.dpi)
        write_pages(pages, args.out / "pages")
        truths = {page.file_name: page.truth for page in pages}
        threads = args.threads or available_cpus()
        report = check(args.out, args.out / "pages", truths, threads, int8=args.int8)
        lines = [markdown_line(report)]
        line = int8_line(report)
        if line is not None:
            lines.append(line)
        speeds = {name: run["pages_per_s"] for name, run in report.get("runs", {}).items()}
        return Results(
            data=report,
            markdown="\n".join(lines) + "\n",
            plots={"pages_s": bars("In process, per precision", "pages/s", speeds)}
            if speeds
            else {},
        )
