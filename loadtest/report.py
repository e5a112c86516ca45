"""Load-test reports: results.json (everything), results.md (one table row per level), plots."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadtest.plots import write_plots
from loadtest.result import LevelResult
from loadtest.server_metrics import StageMetrics

__all__ = ["markdown_table", "results_json", "write_reports"]

_COLUMNS = (
    "level",
    "requests",
    "ok",
    "errors",
    "dropped",
    "pages",
    "wall s",
    "pages/s",
    "req/s",
    "p50 s",
    "p95 s",
    "p99 s",
    "max s",
    "mean batch",
    "queue wait ms",
)


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _errors(result: LevelResult) -> str:
    if not result.errors:
        return "0"
    causes = ", ".join(f"{cause}: {count}" for cause, count in result.errors.items())
    return f"{result.error_count} ({causes})"


def _per_stage(
    metrics: dict[str, StageMetrics] | None, value: Callable[[StageMetrics], float | None]
) -> str:
    if not metrics:
        return "-"
    cells = [(stage, value(m)) for stage, m in metrics.items()]
    return ", ".join(f"{stage or '?'} {v:.2f}" for stage, v in cells if v is not None) or "-"


def _row(result: LevelResult) -> list[str]:
    level = result.label + (" (truncated)" if result.truncated else "")
    return [
        level,
        str(result.requests),
        str(result.successes),
        _errors(result),
        str(result.dropped),
        str(result.pages),
        _number(result.wall_s, 2),
        _number(result.throughput_pages_s, 2),
        _number(result.throughput_requests_s, 2),
        _number(result.p50_s),
        _number(result.p95_s),
        _number(result.p99_s),
        _number(result.max_s),
        _per_stage(result.metrics, lambda m: m.mean_batch_size),
        _per_stage(
            result.metrics,
            lambda m: None if m.mean_queue_wait_s is None else m.mean_queue_wait_s * 1000,
        ),
    ]


def markdown_table(results: Sequence[LevelResult]) -> str:
    """A GitHub Markdown table, one row per level; ``-`` where a figure is not available."""
    lines = [
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(_COLUMNS))) + "|",
    ]
    lines.extend("| " + " | ".join(_row(result)) + " |" for result in results)
    return "\n".join(lines) + "\n"


def results_json(
    results: Sequence[LevelResult], *, command: Sequence[str], timestamp: datetime
) -> dict[str, Any]:
    """The machine-readable report: the command line, a timestamp and every level's figures."""
    levels = [
        {"label": r.label, "error_count": r.error_count, **dataclasses.asdict(r)} for r in results
    ]
    return {"command": list(command), "timestamp": timestamp.isoformat(), "levels": levels}


def write_reports(
    results: Sequence[LevelResult],
    out_dir: str | Path,
    *,
    command: Sequence[str] | None = None,
) -> list[Path]:
    """Write results.json, results.md and (with matplotlib) PNG plots under ``out_dir``.

    Args:
        results: The levels, in the order they ran.
        out_dir: Created if missing.
        command: The command line to record; defaults to ``sys.argv``.

    Returns:
        The files written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    report = results_json(results, command=sys.argv if command is None else command, timestamp=now)
    json_path = out / "results.json"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md_path = out / "results.md"
    header = f"# OCR load test, {now:%Y-%m-%d %H:%M:%S} UTC\n\n"
    targets = sorted({f"{r.api} API at {r.url}" for r in results})
    intro = "".join(f"Target: {target}\n" for target in targets) + "\n"
    md_path.write_text(header + intro + markdown_table(results), encoding="utf-8")
    return [json_path, md_path, *write_plots(results, out)]
