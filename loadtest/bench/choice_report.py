"""The `choice` scenario's report (`make bench`): speed and text per row, CER per kind of page,
the default set against each other row, and the plots."""

from __future__ import annotations

from typing import Any

from loadtest.bench.common import KINDS
from loadtest.bench.results import Draw, bars

__all__ = ["markdown", "plots", "ratio_lines"]


def _cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _row_name(row: dict[str, Any]) -> str:
    return f"{row['label']} [{row['precision']}]"


def markdown(data: dict[str, Any]) -> str:
    """The tables: speed and text per row, CER per kind of page, and the ratios."""
    rows: list[dict[str, Any]] = data["rows"]
    kinds = sorted({p["kind"] for p in data["pages"]}, key=lambda k: (*KINDS, k).index(k))
    levels = [str(c) for c in data["levels"]]
    head = ["row", *(f"c={c} pages/s" for c in levels), *(f"c={c} correct" for c in levels)]
    head += ["failed / changed", "core-s a page", "CER", "merged words", "word F1"]
    lines = [
        f"{len(data['pages'])} pages: "
        + ", ".join(f"{kind} {sum(p['kind'] == kind for p in data['pages'])}" for kind in kinds)
        + ". faster-paddle: pages alone in the c=1 columns, `ocr_batch` of 4 in the c=4 ones.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {_row_name(row)} | not run: {row['error']} |")
            continue
        lv = row["levels"]
        top = lv.get(levels[-1], {})
        cells = [_cell(lv.get(c, {}).get("throughput_pages_s")) for c in levels]
        cells += [_cell(lv.get(c, {}).get("correct_pages_s")) for c in levels]
        score = row["scores"]["all"]
        cells += [
            f"{top.get('failed', 0)} / {top.get('changed', 0)} of {top.get('requests', 0)}",
            _cell(top.get("core_s_a_page"), 2),
            f"{score['cer'] * 100:.2f}%",
            str(score["merged_words"]),
            f"{score['word_f1']:.4f}",
        ]
        lines.append(f"| {_row_name(row)} | " + " | ".join(cells) + " |")
    lines += ["", "CER (merged words) per kind of page, of the answers to pages alone:", ""]
    lines += ["| row | " + " | ".join(kinds) + " |", "|" + "---|" * (len(kinds) + 1)]
    for row in rows:
        if "error" in row:
            continue
        cells = [
            f"{row['scores'][k]['cer'] * 100:.2f}% ({row['scores'][k]['merged_words']})"
            for k in kinds
        ]
        lines.append(f"| {_row_name(row)} | " + " | ".join(cells) + " |")
    lines += ["", *ratio_lines(rows, levels)]
    return "\n".join(lines) + "\n"


def _correct(row: dict[str, Any], level: str) -> float | None:
    value = row.get("levels", {}).get(level, {}).get("correct_pages_s")
    return float(value) if value else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def ratio_lines(rows: list[dict[str, Any]], levels: list[str]) -> list[str]:
    """The default set against each other row at the same precision, in correct pages/s."""
    lines = []
    ran = [row for row in rows if "error" not in row]
    for default in (r for r in ran if r.get("default_set")):
        precision = default["precision"]
        errors = 1 - default["scores"]["all"]["word_f1"]
        for other in ran:
            if other is default or (
                other["system"] != "faster-paddle" and other["precision"] != precision
            ):
                continue
            speeds = ", ".join(
                f"c={c} {_ratio(_correct(default, c), _correct(other, c))}" for c in levels
            )
            theirs = 1 - other["scores"]["all"]["word_f1"]
            lines.append(
                f"- {_row_name(default)} / {_row_name(other)}: correct pages/s {speeds}; word "
                f"errors (1 - F1) {errors * 100:.2f}% against {theirs * 100:.2f}%, merged words "
                f"{default['scores']['all']['merged_words']} against "
                f"{other['scores']['all']['merged_words']}"
            )
    return lines


def plots(rows: list[dict[str, Any]]) -> dict[str, Draw]:
    """Correct pages/s at the highest level, and CER, per row."""
    ran = [row for row in rows if "error" not in row]
    if not ran:
        return {}
    top = max(ran[0]["levels"], key=int)
    return {
        "correct_pages_s": bars(
            f"Correct pages/s at c={top}",
            "pages/s",
            {_row_name(r): _correct(r, top) or 0.0 for r in ran},
        ),
        "cer": bars(
            "CER over all pages",
            "CER %",
            {_row_name(r): r["scores"]["all"]["cer"] * 100 for r in ran},
        ),
    }
