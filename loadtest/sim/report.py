"""Simulation reports: `summary.json` and `summary.md` per configuration and for the whole run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtest.sim.plots import write_compare_plot, write_run_plots
from loadtest.sim.run import SimResult
from loadtest.sim.summary import summarize

ASSUMPTIONS = (
    "CPU device and CPU-worker latencies are calibrated from measurements on this 2-core machine "
    "(docs/performance.md; `loadtest/sim/calibration.py`). GPU latencies are parameters, "
    "not measurements: no GPU was measured here."
)

_COLUMNS = (
    "config",
    "pages/s",
    "interactive p50 / p95 / p99 s",
    "background p50 / p95 s",
    "requests ok",
    "503 shed",
    "504",
    "cancelled",
    "utilisation",
    "mean batch rows (det, rec)",
    "sim wall s",
)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _devices_cell(summary: dict[str, Any], key: str) -> str:
    cells = []
    for name, device in summary["devices"].items():
        if key == "utilisation":
            thread = device["thread_utilisation"]
            more = f" (thread {100 * thread:.0f}%)" if thread else ""
            cells.append(f"{name} {100 * device['utilisation']:.0f}%{more}")
        else:
            stages = device["stages"]
            rows = [f"{stages[s]['mean_rows']:.1f}" if s in stages else "-" for s in ("det", "rec")]
            cells.append(f"{name} {', '.join(rows)}")
    workers = summary["cpu_workers"]
    if key == "utilisation":
        shared = [d["device"] for d in summary["devices"].values()]
        for unit, busy in summary["device_utilisation"].items():
            if shared.count(unit) > 1:
                cells.append(f"{unit} {100 * busy:.0f}% in all")
        cells.append(f"{workers} CPU workers {100 * summary['cpu_workers_utilisation']:.0f}%")
    return "; ".join(cells)


def table_row(summary: dict[str, Any]) -> list[str]:
    """One configuration's cells, in `_COLUMNS` order."""
    i, b = summary["interactive"], summary["background"]
    background = f"{_s(b['p50_s'])} / {_s(b['p95_s'])}" if b["requests"] else "-"
    return [
        summary["name"],
        f"{summary['throughput_pages_s']:.3f}",
        f"{_s(i['p50_s'])} / {_s(i['p95_s'])} / {_s(i['p99_s'])}",
        background,
        f"{i['ok']}" + (f" + {b['ok']} job pages" if b["requests"] else ""),
        f"{i['shed']}" + (f" + {b['shed']}" if b["shed"] else ""),
        f"{i['deadline']}" + (f" + {b['deadline']}" if b["deadline"] else ""),
        str(i["cancelled"]),
        _devices_cell(summary, "utilisation"),
        _devices_cell(summary, "rows"),
        f"{summary['simulation']['wall_s']:.1f}",
    ]


def markdown_table(summaries: Sequence[dict[str, Any]]) -> str:
    """A Markdown table, one row per configuration."""
    lines = [
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "|".join("---" for _ in _COLUMNS) + "|",
    ]
    lines.extend("| " + " | ".join(table_row(s)) + " |" for s in summaries)
    return "\n".join(lines) + "\n"


def _run_markdown(summary: dict[str, Any]) -> str:
    scheduler = summary["scheduler"]
    waits = ", ".join(
        f"{stage} {w['mean']:.0f} ms (max {w['max']:.0f})"
        for stage, w in summary["queue_wait_ms"].items()
    )
    lines = [
        f"# Simulation `{summary['name']}`: {summary['description']}",
        "",
        f"Traffic for {summary['duration_s']:.0f} s simulated; figures over "
        f"{summary['window_s'][0]:.0f}-{summary['window_s'][1]:.0f} s; placement "
        f"{'on' if summary['placement'] else 'off'}; max_inflight_pages "
        f"{summary['max_inflight_pages']}; queue max_wait_ms {summary['queues_max_wait_ms']}.",
        "",
        markdown_table([summary]),
        f"Queue waits: {waits}.",
        "",
        f"Policy: {scheduler['select_calls']} `select` calls ({scheduler['select_us_mean']} us "
        f"each here), {scheduler['select_calls_skipped']} skipped as known, "
        f"{scheduler['spin_rechecks']} looks again at once (a busy loop in the server); the "
        f"server's event loop would spend at least {100 * scheduler['select_core_share']:.1f}% "
        "of a core in `select`.",
        "",
        f"Assumptions: {ASSUMPTIONS}",
        "",
    ]
    return "\n".join(lines)


def write_run(result: SimResult, out: Path) -> tuple[dict[str, Any], list[Path]]:
    """Write one configuration's summary and plots under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(result)
    json_path = out / "summary.json"
    json_path.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    md_path = out / "summary.md"
    md_path.write_text(_run_markdown(summary), encoding="utf-8")
    return summary, [json_path, md_path, *write_run_plots(result, out)]


def write_overview(summaries: Sequence[dict[str, Any]], out: Path, command: str) -> list[Path]:
    """The table of every configuration run, its JSON, and the comparison plot."""
    out.mkdir(parents=True, exist_ok=True)
    md_path = out / "summary.md"
    md_path.write_text(
        f"# Scheduling simulator\n\n`{command}`\n\n{markdown_table(summaries)}\n"
        f"Assumptions: {ASSUMPTIONS}\n",
        encoding="utf-8",
    )
    json_path = out / "summary.json"
    json_path.write_text(
        json.dumps({"command": command, "runs": list(summaries)}, indent=1) + "\n",
        encoding="utf-8",
    )
    return [md_path, json_path, *write_compare_plot(summaries, out)]
