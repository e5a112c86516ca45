"""What this CPU's precision check costs at start-up, and what it found (issue 46).

    python -m loadtest.bench.precision_startup --out precision-startup-out --rounds 2

Starts `ocr-serve` (the default config, CPU device workers) until `/readyz` answers 200, and
measures the seconds that took and the CPU seconds of the whole process tree (every worker's):
at `openvino_precision = "f32"` (no check runs), at "auto" with an empty verdict cache (the cold
start: the check measures), then `--rounds` times "auto" with that cache (warm) and f32 again,
interleaved, so that a shared machine's drift falls on both. Prints a Markdown table of the
starts, then what the check found for each model of each set (`/readyz`'s `precision_checks`):
CER and merged words at f32 and at each precision tried, by language, and the verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil

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


def start_once(out: Path, label: str, precision: str, cache_dir: Path) -> dict[str, Any]:
    """One start to ready: its seconds, the tree's CPU seconds, each worker's precision and
    checks."""
    folder = out / label
    folder.mkdir(parents=True, exist_ok=True)
    config = (
        OURS_CPU_TOML
        + f'[jobs]\ndata_dir = "{folder / "jobs"}"\n'
        + f'[engine]\nopenvino_precision = "{precision}"\n'
        + f'precision_check_dir = "{cache_dir}"\n'
    )
    started = time.monotonic()
    server: ServerProcess = start_ours(folder, config)
    seen: dict[int, float] = {}
    try:
        while True:
            tree_cpu_s(server.process.pid, seen)
            if server.process.poll() is not None:
                raise RuntimeError(f"{label}: the server exited; see {server.log}")
            try:
                if httpx.get(f"{server.url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("precision-startup-out"))
    parser.add_argument("--rounds", type=int, default=2, help="warm and f32 starts after cold")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cache_dir = Path(tempfile.mkdtemp(prefix="verdicts-", dir=args.out))
    starts = [
        start_once(args.out, "f32 forced (no check)", "f32", cache_dir),
        start_once(args.out, "auto, cold (the check measures)", "auto", cache_dir),
    ]
    for i in range(args.rounds):
        starts.append(start_once(args.out, f"auto, warm (cached) #{i + 1}", "auto", cache_dir))
        starts.append(start_once(args.out, f"f32 forced #{i + 1}", "f32", cache_dir))
    (args.out / "starts.json").write_text(json.dumps(starts, indent=1) + "\n")
    for line in [*starts_table(starts), "", *checks_table(starts[1]["checks"])]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
