"""The one results format of `ocr-bench`: `results.json`, `results.md` and PNG plots.

Every scenario returns a `Results`: everything it measured (JSON-able), its Markdown tables, and
the plots to draw. `write` puts them under `--out` below the report header
(`loadtest.bench.header`): `results.json` holds the header, the options the run was given and the
data; `results.md` the header and the tables (and is printed); each plot is `<name>.png`, drawn
with matplotlib's object API where it is installed (the `loadtest` extra), else left out.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadtest.bench.header import markdown as header_markdown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Draw", "Results", "bars", "write"]

Draw = Callable[["Figure"], None]
"""Draws one plot on an empty matplotlib figure."""


@dataclass(slots=True, kw_only=True)
class Results:
    """What a scenario measured."""

    data: dict[str, Any]
    """Every figure, JSON-able."""
    markdown: str
    """The tables and lines a reader needs, with the ratios the goals are stated in."""
    plots: dict[str, Draw] = field(default_factory=dict)
    """File stem -> how to draw it."""
    failed: bool = False
    """The scenario could not measure what it is for (a row failed to run): exit status 1."""


def bars(title: str, unit: str, values: Mapping[str, float]) -> Draw:
    """A horizontal bar per row: `values` (label -> figure in `unit`), labelled."""

    def draw(figure: Figure) -> None:
        axes = figure.subplots()
        labels = list(values)
        axes.barh(labels, [values[label] for label in labels])
        axes.invert_yaxis()
        for y, label in enumerate(labels):
            axes.annotate(f"{values[label]:.3g}", (values[label], y), fontsize=8, va="center")
        axes.set_xlabel(unit)
        axes.set_title(title)
        axes.grid(True, axis="x", alpha=0.3)
        figure.tight_layout()

    return draw


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def options(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed options as JSON-able data (the harness' own keys left out)."""
    return {k: _jsonable(v) for k, v in vars(args).items() if k not in ("scenario", "factory")}


def write(
    out: Path, header: dict[str, Any], args: argparse.Namespace, results: Results
) -> list[Path]:
    """Write `results` under `out` below `header`; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    report = {"header": header, "options": options(args), "results": results.data}
    json_path = out / "results.json"
    json_path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    md_path = out / "results.md"
    md_path.write_text(header_markdown(header) + "\n" + results.markdown.strip() + "\n")
    written = [json_path, md_path]
    if results.plots and importlib.util.find_spec("matplotlib") is not None:
        # The object-oriented API, not pyplot: no global figure state and no GUI backend.
        from matplotlib.figure import Figure

        for name, draw in results.plots.items():
            figure = Figure(figsize=(11, 5))  # room for the rows' long labels
            draw(figure)
            path = out / f"{name}.png"
            figure.savefig(path, dpi=100)
            written.append(path)
    return written
