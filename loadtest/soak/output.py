"""Soak reports: soak.json (every sample), soak.md (per-process table, verdicts), soak.png."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadtest.result import LevelResult
from loadtest.soak.probe import Sample
from loadtest.soak.report import Criterion, Growth, Limits, ProcessRow, after_warmup

__all__ = ["SoakRun", "markdown", "write_outputs"]

_MIB = 2**20


@dataclass(frozen=True, slots=True, kw_only=True)
class SoakRun:
    """Everything one soak measured and decided."""

    command: list[str]
    settings: dict[str, Any]
    """The command-line options."""
    server: dict[str, Any]
    """pid, segment prefix, roles, oneDNN cache capacity in effect, exit code, log path."""
    result: LevelResult
    distinct_sizes: int
    samples: list[Sample]
    warmup_s: float
    """When the warm-up ended: `--warmup-s`, or later when its requests took longer."""
    end_s: float
    """When traffic stopped being sent: the warm-up and the judged span after it."""
    limits: Limits
    rows: list[ProcessRow]
    total: Growth
    idle_segments: int
    stop_segments: int
    criteria: list[Criterion]
    timestamp: datetime = dataclasses.field(default_factory=lambda: datetime.now(UTC))


def _mib(value: float) -> str:
    return f"{value / _MIB:.0f}"


def _pct(growth: Growth) -> str:
    return f"{growth.fraction * 100:+.1f} %"


def _process_table(run: SoakRun) -> list[str]:
    lines = [
        "| process | pid | RSS start MiB | RSS end MiB | growth | of the server | "
        "USS start MiB | USS end MiB | USS growth | fds start | fds end |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in run.rows:
        uss = [_mib(r.uss.start), _mib(r.uss.end), _pct(r.uss)] if r.uss else ["-"] * 3
        role = r.role if r.throughout else f"{r.role} (not throughout)"
        share = f"{r.share_of(run.total) * 100:+.1f} %"
        cells = [role, str(r.pid), _mib(r.rss.start), _mib(r.rss.end), _pct(r.rss), share, *uss]
        lines.append("| " + " | ".join([*cells, str(r.fds_start), str(r.fds_end)]) + " |")
    total = run.total
    lines.append(
        f"| **all** | | {_mib(total.start)} | {_mib(total.end)} | {_pct(total)} | {_pct(total)} "
        f"| | | | {sum(r.fds_start for r in run.rows)} | {sum(r.fds_end for r in run.rows)} |"
    )
    return lines


def markdown(run: SoakRun) -> str:
    """The human report: set-up, traffic, the per-process table and the criteria."""
    s, r = run.settings, run.result
    judged = after_warmup(run.samples, run.warmup_s, run.end_s)
    fraction = run.limits.window_fraction
    during = [x.segments for x in run.samples]
    verdict = "PASS" if all(c.passed for c in run.criteria) else "FAIL"
    errors = ", ".join(f"{k}: {v}" for k, v in r.errors.items()) or "none"
    capacity = run.server.get("mkldnn_cache_capacity")
    lines = [
        f"# Soak, {run.timestamp:%Y-%m-%d %H:%M:%S} UTC: {verdict}",
        "",
        f"- server: ocr-serve pid {run.server['pid']}, {len(run.rows)} processes, "
        f"oneDNN shape cache capacity in effect: {capacity} (0 = unbounded)",
        f"- traffic: {'/v1/ocr' if s['api'] == 'v1' else '/ocr'}, closed loop, concurrency "
        f"{s['concurrency']}, {run.end_s:.0f} s (warm-up {run.warmup_s:.0f} s); {s['pages']} "
        f"real pages at {s['dpi']:g} dpi, each request rescaled x{s['min_scale']:g}-"
        f"{s['max_scale']:g} (seed {s['seed']}): {run.distinct_sizes} distinct sizes",
        f"- requests: {r.requests} done, {r.successes} ok, errors {errors}; "
        f"{r.throughput_pages_s:.2f} pages/s, p50 {r.p50_s or 0:.2f} s, p95 {r.p95_s or 0:.2f} s",
        f"- samples: every {s['sample_s']:g} s, {len(run.samples)} in all, {len(judged)} judged "
        f"(after warm-up, before the drain); growth = mean of the last {fraction:.0%} of "
        f"those against the mean of the first {fraction:.0%}",
        f"- segments with the server's prefix: at most {max(during, default=0)} during traffic, "
        f"{run.idle_segments} once idle, {run.stop_segments} after stop "
        f"(the server swept {run.server.get('swept_at_stop', 0)} on stop)",
        "",
        *_process_table(run),
        "",
        "| criterion | result | detail |",
        "|---|---|---|",
        *(f"| {c.name} | {'pass' if c.passed else 'FAIL'} | {c.detail} |" for c in run.criteria),
    ]
    return "\n".join(lines) + "\n"


def _json(run: SoakRun) -> dict[str, Any]:
    return {
        "command": run.command,
        "timestamp": run.timestamp.isoformat(),
        "settings": run.settings,
        "server": run.server,
        "warmup_s": run.warmup_s,
        "end_s": run.end_s,
        "limits": dataclasses.asdict(run.limits),
        "result": dataclasses.asdict(run.result) | {"metrics": None},
        "distinct_sizes": run.distinct_sizes,
        "idle_segments": run.idle_segments,
        "stop_segments": run.stop_segments,
        "total": dataclasses.asdict(run.total) | {"fraction": run.total.fraction},
        "processes": [
            dataclasses.asdict(row)
            | {
                "rss_growth": row.rss.fraction,
                "rss_growth_of_server": row.share_of(run.total),
                "fd_growth": row.fd_growth,
            }
            for row in run.rows
        ],
        "criteria": [dataclasses.asdict(c) for c in run.criteria],
        "samples": [dataclasses.asdict(sample) for sample in run.samples],
    }


def _plot(run: SoakRun, path: Path) -> None:
    # The object-oriented API, not pyplot: no global figure state and no GUI backend.
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 7))
    memory, files = figure.subplots(2, 1, sharex=True, height_ratios=[2, 1])
    names: dict[int, str] = {}
    for sample in run.samples:
        for p in sample.processes:
            names[p.pid] = f"{p.role} ({p.pid})"
    for pid, name in names.items():
        points = [(x.t_s, p) for x in run.samples for p in x.processes if p.pid == pid]
        t = [t_s for t_s, _ in points]
        (line,) = memory.plot(t, [p.rss_mean_bytes / _MIB for _, p in points], label=name)
        memory.fill_between(
            t,
            [p.rss_min_bytes / _MIB for _, p in points],
            [p.rss_max_bytes / _MIB for _, p in points],
            color=line.get_color(),
            alpha=0.15,
            linewidth=0,
        )
        files.plot(t, [p.fds for _, p in points], label=f"fds {name}")
    files.plot(
        [x.t_s for x in run.samples],
        [x.segments for x in run.samples],
        color="black",
        linestyle=":",
        label="shm segments",
    )
    for axes in (memory, files):
        axes.axvspan(min(0.0, run.samples[0].t_s), run.warmup_s, color="grey", alpha=0.2)
        axes.grid(True, alpha=0.3)
    memory.set_ylabel("RSS (MiB): mean, least-most")
    memory.set_title("Soak: RSS of every server process (warm-up shaded grey)")
    memory.legend(fontsize=7)
    files.set_ylabel("open fds / segments")
    files.set_xlabel("seconds since traffic started")
    files.legend(fontsize=6, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def write_outputs(run: SoakRun, out: Path) -> list[Path]:
    """Write soak.json, soak.md and (with matplotlib and samples) soak.png under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "soak.json", out / "soak.md"]
    written[0].write_text(json.dumps(_json(run), indent=1) + "\n", encoding="utf-8")
    written[1].write_text(markdown(run), encoding="utf-8")
    if run.samples and importlib.util.find_spec("matplotlib") is not None:
        _plot(run, out / "soak.png")
        written.append(out / "soak.png")
    return written
