"""The `baselines` scenario's report: its rows of levels and the ratios its goals are stated in
(ours against the engine limit, the machine limit and each baseline server)."""

from __future__ import annotations

from typing import Any

__all__ = ["BASELINE_LABELS", "RAPIDOCR_KEYS", "host_line", "markdown"]

RAPIDOCR_KEYS = {"onnxruntime": "rapidocr", "openvino": "rapidocr_openvino"}
"""Report key of each RapidOCR engine's row."""

BASELINE_LABELS = {
    "paddlex": "PaddleX basic serving",
    "paddlex_default": "PaddleX basic serving, default install",
    "rapidocr": "RapidOCR API server",
    "rapidocr_openvino": "RapidOCR API server",
}


def _engine(run: dict[str, Any]) -> str:
    workers = f"; {run['workers']}" if "workers" in run else ""
    if "onnxruntime" in run:
        return f"ONNX Runtime {run['onnxruntime']}{workers}"
    if "openvino" in run:
        return f"OpenVINO {run['openvino']} {run.get('precision', 'f32')}{workers}"
    onednn = "oneDNN" if run.get("run_mode", "mkldnn").startswith("mkldnn") else "oneDNN off"
    return f"Paddle {run['paddle']}, {onednn}"


def _level_row(name: str, level: dict[str, Any], limit: float) -> str:
    changed = level.get("changed")
    correct = level.get("correct_pages_s")
    return (
        f"| {name} | {level['concurrency']} | {level['throughput_pages_s']:.3f} | "
        f"{level['throughput_pages_s'] / limit:.2f} | {level['p50_s'] or 0:.2f} | "
        f"{level['p95_s'] or 0:.2f} | {sum(level['errors'].values())} | "
        f"{'' if changed is None else changed} | {'' if correct is None else f'{correct:.3f}'} |"
    )


def _correct_ratio(
    label: str, ours: dict[int, dict[str, Any]], levels: list[dict[str, Any]]
) -> list[str] | None:
    """Ours at concurrency 4 against a baseline at 4, each counting only its correct pages (an
    answer with the text the same server gives that page alone), with how many of the
    baseline's requests failed or changed text; None where either side has no such count."""
    theirs = [lv for lv in levels if lv["concurrency"] == 4]
    if 4 not in ours or ours[4].get("correct_pages_s") is None or not theirs:
        return None
    other = theirs[0]
    if not other.get("correct_pages_s"):
        return None
    ratio = ours[4]["correct_pages_s"] / other["correct_pages_s"]
    raw = ours[4]["throughput_pages_s"] / other["throughput_pages_s"]
    lines = [
        f"- ours / {label} at concurrency 4, correct pages/s: {ratio:.2f}x "
        f"({ours[4]['correct_pages_s']:.3f} / {other['correct_pages_s']:.3f}; all answers: "
        f"{raw:.2f}x)"
    ]
    for lv in levels:
        failed, changed = sum(lv["errors"].values()), lv.get("changed") or 0
        if failed or changed:
            lines.append(
                f"- {label} at concurrency {lv['concurrency']}: of {lv.get('requests', '?')} "
                f"requests {failed} failed ({lv['errors']}), {changed} answered with another "
                "text than it gives the page alone"
            )
    return lines


def _baseline_ratio(
    label: str, ours: dict[int, dict[str, Any]], levels: list[dict[str, Any]]
) -> list[str]:
    """Ours at concurrency 4 against a baseline at 4, in correct pages/s where both were counted
    (`_correct_ratio`); else in pages/s, and where the baseline failed requests at 4, against its
    fastest level without errors instead, and the failures said."""
    correct = _correct_ratio(label, ours, levels)
    if correct is not None:
        return correct
    lines = [
        f"- {label} at concurrency {lv['concurrency']}: {sum(lv['errors'].values())} of "
        f"{lv.get('requests', '?')} requests failed ({lv['errors']})"
        for lv in levels
        if lv["errors"]
    ]
    clean = [lv for lv in levels if not lv["errors"] and lv["throughput_pages_s"]]
    if 4 not in ours or not clean:
        return lines
    at_4 = [lv for lv in clean if lv["concurrency"] == 4]
    other = at_4[0] if at_4 else max(clean, key=lambda lv: lv["throughput_pages_s"])
    ratio = ours[4]["throughput_pages_s"] / other["throughput_pages_s"]
    if at_4:
        return [f"- ours / {label} at concurrency 4: {ratio:.2f}x", *lines]
    return [
        f"- ours at concurrency 4 / {label} at concurrency {other['concurrency']}, its fastest "
        f"level without errors: {ratio:.2f}x",
        *lines,
    ]


def host_line(level: dict[str, Any]) -> str:
    """The CPU side of one of our levels, per page: core-seconds by process group, and the bytes
    moved through shared memory (issue 31)."""
    host = level["host"]
    core = ", ".join(f"{group} {seconds:.3f}" for group, seconds in host["core_s"].items())
    moved = ", ".join(
        f"{key} {size / 2**20:.2f}" for key, size in host["shm_bytes"].items() if key != "total"
    )
    return (
        f"- ours at concurrency {level['concurrency']}, per page: core-s {core}; shared memory "
        f"{host['shm_bytes']['total'] / 2**20:.2f} MiB ({moved})"
    )


def _threads_label(threads: int | None) -> str:
    """The engine limit row's thread count (", 4 threads"); none where an old report has none."""
    if not threads:
        return ""
    return f", {threads} thread{'' if threads == 1 else 's'}"


def _engine_row(threads: str, engine: dict[str, Any], limit: float) -> str:
    """An in-process engine limit's row, its pages/s against the main engine limit's."""
    return (
        f"| engine limit (in process{threads}) | 1 | {engine['pages_per_s']:.3f} | "
        f"{engine['pages_per_s'] / limit:.2f} | {engine['median_page_s']:.2f} (median page) "
        "| | | | |"
    )


def _one_thread_engine(report: dict[str, Any]) -> dict[str, Any] | None:
    """The one-thread in-process engine limit: its own run, or the main one where that ran on
    one thread; None in reports from before issue 28 measured it."""
    if "engine_one_thread" in report:
        one: dict[str, Any] = report["engine_one_thread"]
        return one
    return report["engine"] if report.get("cpu_threads") == 1 else None


def markdown(report: dict[str, Any]) -> str:
    """The summary table, with ratios."""
    engine = report["engine"]
    limit = engine["pages_per_s"]
    threads: int | None = report.get("cpu_threads")
    one_thread = _one_thread_engine(report)
    rows = [
        "| system | concurrency | pages/s | x engine limit | p50 s | p95 s | errors | "
        "changed text | correct pages/s |",
        "|---|---|---|---|---|---|---|---|---|",
        _engine_row(_threads_label(threads), engine, limit),
    ]
    if "engine_one_thread" in report:
        rows.append(_engine_row(_threads_label(1), report["engine_one_thread"], limit))
    rows += [_level_row("ours", level, limit) for level in report.get("ours_levels", [])]
    for precision, run in report.get("ours_precisions", {}).items():
        name = f'ours, openvino_precision = "{precision}"'
        rows += [_level_row(name, level, limit) for level in run["levels"]]
    for backend, levels in report.get("ours_engines", {}).items():
        rows += [_level_row(f"ours, CPU engine {backend}", level, limit) for level in levels]
    baselines = {key: report[key] for key in BASELINE_LABELS if key in report}
    for key, run in baselines.items():
        label = f"{BASELINE_LABELS[key]} ({_engine(run)})"
        rows += [_level_row(label, level, limit) for level in run["levels"]]
    lines = ["\n".join(rows), ""]
    ours = {lv["concurrency"]: lv for lv in report.get("ours_levels", [])}
    for key, run in baselines.items():
        lines += _baseline_ratio(f"{BASELINE_LABELS[key]} ({_engine(run)})", ours, run["levels"])
    if 1 in ours and ours[1]["p50_s"]:
        median = f"{threads}-thread in-process" if threads else "engine"
        lines.append(
            f"- ours p50 at concurrency 1 / {median} median page time: "
            f"{ours[1]['p50_s'] / engine['median_page_s']:.2f} (goal <= 1.00)"
        )
    if 4 in ours and threads and one_thread and one_thread["pages_per_s"]:
        machine = threads * one_thread["pages_per_s"]
        lines.append(
            f"- machine limit: {threads} cores x one-thread engine limit "
            f"{one_thread['pages_per_s']:.3f} = {machine:.3f} pages/s; ours at concurrency 4 / "
            f"machine limit: {ours[4]['throughput_pages_s'] / machine:.2f} (goal >= 0.90)"
        )
    if 1 in ours and ours[1].get("mean_s") and engine.get("mean_page_s"):
        lines.append(
            f"- ours mean latency at concurrency 1 / engine mean page time: "
            f"{ours[1]['mean_s'] / engine['mean_page_s']:.2f}"
        )
    cers = [f"engine {engine['cer']:.4f}"]
    if "ours_cer" in report:
        cers.append(f"ours {report['ours_cer']:.4f}")
    cers += [
        f"{BASELINE_LABELS[key]} ({_engine(run)}) {run['cer']:.4f}"
        for key, run in baselines.items()
    ]
    lines.append(f"- CER on the page set: {', '.join(cers)}")
    lines += [host_line(level) for level in report.get("ours_levels", []) if level.get("host")]
    for worker, precision in report.get("ours_precision", {}).items():
        lines.append(f"- ours, device worker {worker}: {precision}")
    peaks = [f"ours {report.get('ours_peak_rss_mb')} MiB"]
    peaks += [
        f"{BASELINE_LABELS[key]} ({_engine(run)}) {run['peak_rss_mb']} MiB"
        for key, run in baselines.items()
    ]
    lines.append(f"- peak RSS of all server processes: {', '.join(peaks)}")
    for key, reason in report.get("not_run", {}).items():
        lines.append(f"- {BASELINE_LABELS.get(key, key)}: not run: {reason}")
    return "\n".join(lines) + "\n"
