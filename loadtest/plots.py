"""PNG plots of a load test: latency against throughput, batch-size histograms per stage."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from loadtest.result import LevelResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["bucket_labels", "write_plots"]

LATENCY_PNG = "latency_vs_throughput.png"
BATCH_SIZE_PNG = "batch_size_histogram.png"


def bucket_labels(bounds: Sequence[str]) -> list[str]:
    """Readable names of integer-valued histogram buckets: ``["1", "2", "3-4", ">128"]``."""
    labels: list[str] = []
    previous: int | None = None
    for bound in bounds:
        if bound == "+Inf":
            labels.append(f">{previous}" if previous is not None else "all")
            continue
        upper = int(float(bound))
        if previous is None:
            labels.append(str(upper) if upper <= 1 else f"<={upper}")
        else:
            low = previous + 1
            labels.append(str(upper) if low >= upper else f"{low}-{upper}")
        previous = upper
    return labels


def _latency_plot(figure: Figure, results: Sequence[LevelResult]) -> None:
    axes = figure.subplots()
    points = [
        (r.label, r.throughput_pages_s, r.p50_s, r.p95_s)
        for r in results
        if r.p50_s is not None and r.p95_s is not None
    ]
    x = [point[1] for point in points]
    axes.plot(x, [point[2] for point in points], marker="o", label="p50")
    axes.plot(x, [point[3] for point in points], marker="o", label="p95")
    for label, throughput, _, p95 in points:
        axes.annotate(label, (throughput, p95), fontsize=8)
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    axes.set_xlabel("throughput (pages/s)")
    axes.set_ylabel("latency (s)")
    axes.set_title("Latency against throughput")
    axes.grid(True, alpha=0.3)
    axes.legend()


def _batch_plot(figure: Figure, results: Sequence[LevelResult], stages: list[str]) -> None:
    grid = figure.subplots(len(stages), 1, squeeze=False)
    for row, stage in enumerate(stages):
        axes = grid[row][0]
        histograms = [
            (r.label, r.metrics[stage].batch_size_histogram)
            for r in results
            if r.metrics is not None and stage in r.metrics
        ]
        bounds = list(histograms[0][1])
        used = max(
            (i for _, h in histograms for i, b in enumerate(bounds) if h.get(b, 0) > 0), default=0
        )
        bounds = bounds[: used + 1]
        width = 0.8 / len(histograms)
        for k, (label, histogram) in enumerate(histograms):
            positions = [i + k * width for i in range(len(bounds))]
            axes.bar(positions, [histogram.get(b, 0) for b in bounds], width, label=label)
        axes.set_xticks([i + 0.4 - width / 2 for i in range(len(bounds))], bucket_labels(bounds))
        axes.set_title(f"stage {stage or '?'}")
        axes.set_xlabel("batch size")
        axes.set_ylabel("batches")
        axes.legend(fontsize=8)
    figure.tight_layout()


def write_plots(results: Sequence[LevelResult], out_dir: Path) -> list[Path]:
    """Write the PNG plots under ``out_dir``; nothing when matplotlib is not installed.

    Returns:
        The files written.
    """
    if importlib.util.find_spec("matplotlib") is None:
        return []
    # The object-oriented API, not pyplot: no global figure state and no GUI backend.
    from matplotlib.figure import Figure

    written: list[Path] = []
    if any(r.p50_s is not None for r in results):
        figure = Figure(figsize=(7, 5))
        _latency_plot(figure, results)
        figure.savefig(out_dir / LATENCY_PNG, dpi=100)
        written.append(out_dir / LATENCY_PNG)
    stages = sorted(
        {s for r in results if r.metrics for s, m in r.metrics.items() if m.batch_size_histogram}
    )
    if stages:
        figure = Figure(figsize=(8, 3 * len(stages)))
        _batch_plot(figure, results, stages)
        figure.savefig(out_dir / BATCH_SIZE_PNG, dpi=100)
        written.append(out_dir / BATCH_SIZE_PNG)
    return written
