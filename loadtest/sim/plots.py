"""PNG plots of a simulation: a timeline, batch sizes per stage and device, latency CDFs, and a
comparison of configurations. Object-oriented matplotlib (no pyplot state), as `loadtest.plots`."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from loadtest.sim.run import SimResult
from loadtest.sim.stats import KINDS

if TYPE_CHECKING:
    from matplotlib.axes import Axes

TIMELINE_PNG = "timeline.png"
BATCH_SIZES_PNG = "batch_sizes.png"
LATENCY_PNG = "latency_cdf.png"
COMPARE_PNG = "compare.png"


def _p95_by_bin(latencies: Any, bins: Any, count: int) -> list[float]:
    values = np.frombuffer(latencies, dtype=np.float64)
    where = np.frombuffer(bins, dtype=np.int32)
    out = []
    for b in range(count):
        chosen = values[where == b]
        out.append(float(np.percentile(chosen, 95)) if chosen.size else float("nan"))
    return out


def _timeline(result: SimResult, out: Path) -> Path:
    from matplotlib.figure import Figure

    recorder = result.recorder
    count = recorder.bins
    x = [(i + 0.5) * recorder.bin_s for i in range(count)]
    figure = Figure(figsize=(9, 9))
    top, middle, bottom = figure.subplots(3, 1, sharex=True)
    arrivals = [n / recorder.bin_s for n in recorder.arrivals_bins]
    top.plot(x, arrivals, label="interactive requests/s arriving", color="grey", alpha=0.6)
    for kind in KINDS:
        pages = [n / recorder.bin_s for n in recorder.pages_bins[kind]]
        if any(pages):
            top.plot(x, pages, label=f"{kind} pages/s answered")
    top.set_ylabel("per second")
    top.legend(fontsize=8)
    top.grid(True, alpha=0.3)
    for kind in KINDS:
        stats = recorder.kinds[kind]
        if len(stats.latencies_s):
            p95 = _p95_by_bin(stats.latencies_s, stats.done_bins, count)
            middle.plot(x, p95, label=f"{kind} p95")
    middle.set_ylabel("latency p95 (s)")
    middle.legend(fontsize=8)
    middle.grid(True, alpha=0.3)
    for device, busy in sorted(recorder.device_busy_bins.items()):
        bottom.plot(x, [min(1.0, b / recorder.bin_s) for b in busy], label=device)
    workers = result.config.cpu.workers
    bottom.plot(
        x,
        [b / (recorder.bin_s * workers) for b in recorder.cpu_busy_bins],
        label=f"CPU workers ({workers})",
        linestyle="--",
    )
    bottom.set_ylabel("utilisation")
    bottom.set_xlabel("simulated time (s)")
    bottom.set_ylim(0, 1.05)
    bottom.legend(fontsize=7, ncol=3)
    bottom.grid(True, alpha=0.3)
    for axes in (top, middle, bottom):
        axes.axvspan(0, recorder.start_s, color="grey", alpha=0.1)
    figure.suptitle(f"{result.config.name}: {result.config.description}", fontsize=10)
    figure.tight_layout()
    path = out / TIMELINE_PNG
    figure.savefig(path, dpi=100)
    return path


def _batch_sizes(result: SimResult, out: Path) -> Path | None:
    from matplotlib.figure import Figure

    batches = result.recorder.batches
    stages = sorted({stage for _, stage in batches})
    if not stages:
        return None
    figure = Figure(figsize=(9, 3 * len(stages)))
    grid = figure.subplots(len(stages), 1, squeeze=False)
    for row, stage in enumerate(stages):
        axes: Axes = grid[row][0]
        devices = sorted(device for device, s in batches if s == stage)
        sizes = sorted({size for (d, s), b in batches.items() if s == stage for size in b.rows})
        width = 0.8 / len(devices)
        for k, device in enumerate(devices):
            rows = batches[(device, stage)].rows
            positions = [i + k * width for i in range(len(sizes))]
            axes.bar(positions, [rows.get(size, 0) for size in sizes], width, label=device)
        step = max(1, len(sizes) // 24)
        ticks = list(range(0, len(sizes), step))
        axes.set_xticks([i + 0.4 - width / 2 for i in ticks], [str(sizes[i]) for i in ticks])
        axes.set_title(f"stage {stage}: rows per batch")
        axes.set_ylabel("batches")
        axes.set_yscale("log")
        axes.legend(fontsize=7, ncol=4)
    figure.tight_layout()
    path = out / BATCH_SIZES_PNG
    figure.savefig(path, dpi=100)
    return path


def _latency_cdf(result: SimResult, out: Path) -> Path | None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 5))
    axes = figure.subplots()
    drawn = False
    for kind in KINDS:
        data = np.sort(np.frombuffer(result.recorder.kinds[kind].latencies_s, dtype=np.float64))
        if data.size:
            axes.plot(data, np.arange(1, data.size + 1) / data.size, label=kind)
            drawn = True
    if not drawn:
        return None
    axes.set_xlabel("latency (s)")
    axes.set_ylabel("share of answered requests")
    axes.set_title(f"{result.config.name}: latency CDF")
    axes.grid(True, alpha=0.3)
    axes.legend()
    path = out / LATENCY_PNG
    figure.savefig(path, dpi=100)
    return path


def write_run_plots(result: SimResult, out: Path) -> list[Path]:
    """The plots of one run under `out`; nothing without matplotlib."""
    if importlib.util.find_spec("matplotlib") is None:
        return []
    paths = [_timeline(result, out), _batch_sizes(result, out), _latency_cdf(result, out)]
    return [p for p in paths if p is not None]


def write_compare_plot(summaries: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """Throughput and interactive p50/p95/p99 of every configuration run, side by side."""
    if importlib.util.find_spec("matplotlib") is None or not summaries:
        return []
    from matplotlib.figure import Figure

    names = [s["name"] for s in summaries]
    figure = Figure(figsize=(max(7, 1.4 * len(names)), 7))
    top, bottom = figure.subplots(2, 1)
    x = np.arange(len(names))
    interactive = [s["interactive"]["pages_per_s"] for s in summaries]
    background = [s["background"]["pages_per_s"] for s in summaries]
    top.bar(x, interactive, label="interactive")
    top.bar(x, background, bottom=interactive, label="background")
    top.set_xticks(x, names, fontsize=8)
    top.set_ylabel("pages/s")
    top.set_yscale("log")
    positive = [v for v in (*interactive, *background) if v > 0]
    if positive:
        totals = [a + b for a, b in zip(interactive, background, strict=True)]
        top.set_ylim(min(positive) / 2, max(totals) * 2)
    top.legend(fontsize=8)
    top.grid(True, axis="y", alpha=0.3)
    for k, key in enumerate(("p50_s", "p95_s", "p99_s")):
        values = [s["interactive"][key] or 0.0 for s in summaries]
        bottom.bar(x + (k - 1) * 0.25, values, 0.25, label=key.removesuffix("_s"))
    bottom.set_xticks(x, names, fontsize=8)
    bottom.set_ylabel("interactive latency (s)")
    bottom.legend(fontsize=8)
    bottom.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    path = out / COMPARE_PNG
    figure.savefig(path, dpi=100)
    return [path]
