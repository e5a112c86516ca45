"""What this CPU's precision check costs at start-up, and what it found (issue 46).

    ocr-bench precision-startup --repeats 2 [--cold ahead]

Starts `ocr-serve` (the default config, CPU device workers) until `/readyz` answers 200, and
measures the seconds that took and the CPU seconds of the whole process tree (every worker's):
at `openvino_precision = "f32"` (no check runs), at "auto" with an empty verdict cache (the cold
start: the check measures), then `--repeats` times "auto" with that cache (warm) and f32 again,
interleaved, so that a shared machine's drift falls on both. `--cold ahead` measures the cold
check by itself instead (`python -m serving.engine.precision_ahead`, the way a deployment runs
it before the servers start; a cold start is then a warm one plus it), for machines so loaded
that a cold start passes the device workers' start-up limit. Prints a Markdown table of the
starts, then what the check found for each model of each set (`/readyz`'s `precision_checks`):
CER and merged words at f32 and at each precision tried, by language, and the verdict.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from loadtest.bench.results import Results
from loadtest.bench.scenario import Scenario, register
from loadtest.servers import OURS_CPU_TOML, ServerProcess, start_ours
from serving.engine.choice import PRECISION_CHECKS_KEY as CHECKS


def tree_cpu_s(pid: int, seen: dict[int, float]) -> None:
    """Record the CPU seconds of `pid` and its descendants into `seen` (a process that has
    exited keeps its last reading)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        seen[proc.pid] = times.user + times.system


def _config(folder: Path, precision: str, cache_dir: Path) -> str:
    return (
        OURS_CPU_TOML
        + f'[jobs]\ndata_dir = "{folder / "jobs"}"\n'
        + f'[engine]\nopenvino_precision = "{precision}"\n'
        + f'precision_check_dir = "{cache_dir}"\n'
    )


def check_ahead(out: Path, cache_dir: Path) -> dict[str, Any]:
    """The cold check by itself (`serving.engine.precision_ahead`): its seconds and CPU
    seconds, and what it found."""
    folder = out / "check-ahead"
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "ours.toml"
    config.write_text(_config(folder, "auto", cache_dir))
    argv = [sys.executable, "-m", "serving.engine.precision_ahead", "--config", str(config)]
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    (folder / "ahead.log").write_text(done.stderr)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "label": "the check alone, cold (precision_ahead)",
        "ready_s": round(time.monotonic() - started, 1),
        "cpu_s": round(cpu_s, 1),
        "precision": {},
        "checks": json.loads(done.stdout),
    }


def start_once(out: Path, label: str, precision: str, cache_dir: Path) -> dict[str, Any]:
    """One start to ready: its seconds, the tree's CPU seconds, each worker's precision and
    checks."""
    folder = out / label
    folder.mkdir(parents=True, exist_ok=True)
    config = _config(folder, precision, cache_dir)
    started = time.monotonic()
    server: ServerProcess = start_ours(folder, config)
    seen: dict[int, float] = {}
    try:
        while True:
            tree_cpu_s(server.process.pid, seen)
            if server.process.poll() is not None:
                raise RuntimeError(f"{label}: the server exited; see {server.log}")
            try:
                answer = httpx.get(f"{server.url}/readyz", timeout=5)
            except httpx.TransportError:
                time.sleep(0.25)
                continue
            if answer.status_code == 200:
                break
            if "error" in answer.json():  # the start failed (a device worker's start-up limit)
                raise RuntimeError(f"{label}: {answer.json()['error']}; see {server.log}")
            time.sleep(0.25)
        ready_s = time.monotonic() - started
        tree_cpu_s(server.process.pid, seen)
        devices = httpx.get(f"{server.url}/readyz", timeout=5).json()["devices"]
    finally:
        server.stop()
    return {
        "label": label,
        "ready_s": round(ready_s, 1),
        "cpu_s": round(sum(seen.values()), 1),
        "precision": {name: d.get("precision") for name, d in devices.items()},
        "checks": next((d[CHECKS] for d in devices.values() if CHECKS in d), {}),
    }


def starts_table(starts: list[dict[str, Any]]) -> list[str]:
    """The starts as Markdown rows."""
    lines = ["| start | ready s | CPU s (process tree) | precision |", "|---|---|---|---|"]
    for s in starts:
        precisions = "; ".join(f"{name}: {p}" for name, p in s["precision"].items())
        lines.append(f"| {s['label']} | {s['ready_s']} | {s['cpu_s']} | {precisions} |")
    return lines


def checks_table(checks: dict[str, Any]) -> list[str]:
    """What the check found per model: CER and merged words at f32 and each precision tried
    (all languages, then those that differ), and the verdict."""
    lines = [
        "| model (stage) | f32 CER, merged | tried | its CER, merged | languages that differ "
        "(edits, merged: f32 -> tried) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for stage, check in checks.items():
        if not check.get("checked"):
            lines.append(f"| {check['model']} ({stage}) | | | | | not checked: {check['note']} |")
            continue
        f32 = check["at"]["f32"]
        for precision, at in check["at"].items():
            if precision == "f32":
                continue
            differ = []
            for lang, score in at["by_language"].items():
                base = f32["by_language"][lang]
                if (score["edits"], score["merged_words"]) != (base["edits"], base["merged_words"]):
                    differ.append(
                        f"{lang} {base['edits']}->{score['edits']}, "
                        f"{base['merged_words']}->{score['merged_words']}"
                    )
            verdict = "passed" if at["passed"] else "failed: " + "; ".join(at["shortfalls"])
            lines.append(
                f"| {check['model']} ({stage}) | {f32['cer']:.2%}, {f32['merged_words']} | "
                f"{precision} (with {at.get('read_with', '')}) | {at['cer']:.2%}, "
                f"{at['merged_words']} | {'; '.join(differ) or 'none'} | {verdict} |"
            )
    return lines


@register
class PrecisionStartup(Scenario):
    """The start-up cost of the precision check, and its verdicts."""

    name = "precision-startup"
    help = "start-up seconds and CPU seconds at f32, auto cold and auto warm; the check's verdicts"
    shared = ("out", "repeats")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument(
            "--cold",
            choices=("server", "ahead"),
            default="server",
            help="the cold check as a server start, or by itself (precision_ahead)",
        )

    def run(self, args: argparse.Namespace) -> Results:
        """f32, cold, then `--repeats` rounds of warm and f32 starts."""
        cache_dir = Path(tempfile.mkdtemp(prefix="verdicts-", dir=args.out))
        cold = (
            check_ahead(args.out, cache_dir)
            if args.cold == "ahead"
            else start_once(args.out, "auto, cold (the check measures)", "auto", cache_dir)
        )
        starts = [start_once(args.out, "f32 forced (no check)", "f32", cache_dir), cold]
        for i in range(args.repeats):
            starts.append(start_once(args.out, f"auto, warm (cached) #{i + 1}", "auto", cache_dir))
            starts.append(start_once(args.out, f"f32 forced #{i + 1}", "f32", cache_dir))
        lines = [*starts_table(starts), "", *checks_table(cold["checks"])]
        return Results(data={"starts": starts}, markdown="\n".join(lines) + "\n")
