"""PP-OCRv5 mobile against PP-OCRv6 small on the ONNX engines, side by side in one run.

For each engine and model set: accuracy (CER and word-level F1 against the PDFs' text layer) and
the in-process engine limit (`loadtest.engine_limit`, in its own process), then our server's
throughput at concurrency 4; the model sets alternate within each engine, so their ratio is
measured under the same load. Real document pages rendered at 150 dpi (as `make bench`).

    python -m loadtest.model_compare --out model-compare-out

Prints a Markdown table and writes results.json and results.md under --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.accuracy import WordCounts, char_edits, word_counts
from loadtest.documents import load_documents
from loadtest.engine_limit import real_page_set, write_page_set
from loadtest.run import run_level
from loadtest.servers import start_ours


@dataclass(frozen=True, slots=True)
class ModelSet:
    """A detector and recogniser, and the detection resize they run with."""

    label: str
    det: str
    rec: str
    limit_side_len: int = 64
    limit_type: str = "min"


MODEL_SETS = {
    "v5": ModelSet(
        "PP-OCRv5 mobile", "embedded:PP-OCRv5_mobile_det", "embedded:PP-OCRv5_mobile_rec"
    ),
    "v6": ModelSet("PP-OCRv6 small", "embedded:PP-OCRv6_small_det", "embedded:PP-OCRv6_small_rec"),
    # The detector's standalone default (its preprocessor_config.json, RapidOCR's default).
    "v6-736": ModelSet(
        "PP-OCRv6 small, det 736 min",
        "embedded:PP-OCRv6_small_det",
        "embedded:PP-OCRv6_small_rec",
        limit_side_len=736,
    ),
}

CONFIG = """
[server]
log_level = "warning"
[paddlex]
visualize = false
[models]
det = "{det}"
rec = "{rec}"
[pipeline.det]
limit_side_len = {limit_side_len}
limit_type = "{limit_type}"
[engine]
cpu_backend = "{engine}"
cpu_threads = {threads}
[workers]
devices = ["cpu"]
[jobs]
data_dir = "{jobs_dir}"
"""


def config_text(models: ModelSet, engine: str, threads: int, jobs_dir: Path) -> str:
    """Our configuration for one model set on one engine."""
    return CONFIG.format(
        det=models.det,
        rec=models.rec,
        limit_side_len=models.limit_side_len,
        limit_type=models.limit_type,
        engine=engine,
        threads=threads,
        jobs_dir=jobs_dir,
    )


def accuracy(truths: dict[str, str], texts: dict[str, list[str]]) -> dict[str, float]:
    """CER and micro word-level F1 over the pages."""
    edits = chars = 0
    words = WordCounts(0, 0, 0)
    for name, truth in truths.items():
        hypothesis = "\n".join(texts[name])
        e, n = char_edits(truth, hypothesis)
        edits, chars = edits + e, chars + n
        words = words + word_counts(truth, hypothesis)
    return {
        "cer": round(edits / chars, 5) if chars else 0.0,
        "word_f1": round(words.f1, 5),
        "word_precision": round(words.precision, 5),
        "word_recall": round(words.recall, 5),
    }


def engine_limit(config: Path, pages_dir: Path, out_json: Path, rounds: int) -> dict[str, Any]:
    """`loadtest.engine_limit` in its own process; its figures and texts."""
    argv = [sys.executable, "-m", "loadtest.engine_limit", "--config", str(config)]
    argv += ["--pages-dir", str(pages_dir), "--json", str(out_json), "--rounds", str(rounds)]
    subprocess.run(argv, check=True)
    loaded: dict[str, Any] = json.loads(out_json.read_text())
    return loaded


def server_level(out: Path, text: str, pages: list[Path], concurrency: int) -> dict[str, Any]:
    """Our server on `text`'s configuration: one closed-loop level."""
    server = start_ours(out, text)
    try:
        server.wait_ready("/readyz")
        documents = load_documents(pages)
        result = asyncio.run(
            run_level(
                server.url,
                "v1",
                documents,
                concurrency=concurrency,
                requests=2 * len(documents),
                warmup=concurrency,
                timeout_s=600,
            )
        )
    finally:
        server.stop()
    return {
        "throughput_pages_s": result.throughput_pages_s,
        "p50_s": result.p50_s,
        "errors": sum(result.errors.values()),
        "peak_rss_mb": round(server.memory.peak_bytes / 2**20),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every engine and model set; returns everything measured."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    threads = args.cpu_threads or (os.cpu_count() or 1)
    page_set = real_page_set(args.pages, args.dpi)
    paths = write_page_set(page_set, out / "pages")
    truths = {p.name: truth for p, (_, _, truth) in zip(paths, page_set, strict=True)}
    report: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "pages": [p.name for p in paths],
        "dpi": args.dpi,
        "cpu_threads": threads,
        "cpu_count": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "runs": [],
    }
    for engine in args.engines:
        for key in args.models:
            models = MODEL_SETS[key]
            name = f"{engine}-{key}"
            print(f"{models.label} on {engine}...", file=sys.stderr)
            text = config_text(models, engine, threads, out / "jobs")
            config = out / f"{name}.toml"
            config.write_text(text)
            limit = engine_limit(config, out / "pages", out / f"{name}.json", args.rounds)
            run_: dict[str, Any] = {
                "engine": engine,
                "models": key,
                "label": models.label,
                **accuracy(truths, limit.pop("texts")),
                "engine_limit": limit,
            }
            if args.concurrency and key in args.server_models and engine in args.server_engines:
                run_["server"] = server_level(out, text, paths, args.concurrency)
            report["runs"].append(run_)
            print(json.dumps(run_), file=sys.stderr)
    report["load_average_at_end"] = os.getloadavg()
    return report


def markdown(report: dict[str, Any], concurrency: int) -> str:
    """The table, with each model set's speed relative to PP-OCRv5 mobile on the same engine."""
    rows = [
        f"| engine | models | CER | word F1 | engine limit pages/s | median page s | "
        f"server c={concurrency} pages/s | speed vs v5 (limit / server) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = {r["engine"]: r for r in report["runs"] if r["models"] == "v5"}
    for r in report["runs"]:
        limit = r["engine_limit"]
        server = r.get("server")
        ref = base.get(r["engine"])
        ratio = ""
        if ref is not None:
            ratio = f"{limit['pages_per_s'] / ref['engine_limit']['pages_per_s']:.2f}"
            if server and ref.get("server"):
                ratio += (
                    f" / {server['throughput_pages_s'] / ref['server']['throughput_pages_s']:.2f}"
                )
        rows.append(
            f"| {r['engine']} | {r['label']} | {r['cer']:.4f} | {r['word_f1']:.4f} | "
            f"{limit['pages_per_s']:.3f} | {limit['median_page_s']:.2f} | "
            f"{server['throughput_pages_s']:.3f} | {ratio} |"
            if server
            else f"| {r['engine']} | {r['label']} | {r['cer']:.4f} | {r['word_f1']:.4f} | "
            f"{limit['pages_per_s']:.3f} | {limit['median_page_s']:.2f} | | {ratio} |"
        )
    start, end = report["load_average_at_start"], report["load_average_at_end"]
    rows.append("")
    rows.append(
        f"{len(report['pages'])} pages at {report['dpi']:g} dpi, {report['cpu_threads']} threads "
        f"on {report['cpu_count']} cores; 1-minute load average {start[0]:.1f} at the start, "
        f"{end[0]:.1f} at the end (other work on the machine)."
    )
    return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.model_compare", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("model-compare-out"))
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--dpi", type=float, default=150.0)
    parser.add_argument("--rounds", type=int, default=1, help="engine limit: times through pages")
    parser.add_argument("--cpu-threads", type=int, default=0, help="0 = number of cores")
    parser.add_argument(
        "--engines", type=lambda s: s.split(","), default=["onnxruntime", "openvino"]
    )
    parser.add_argument(
        "--models",
        type=lambda s: s.split(","),
        default=["v5", "v6", "v6-736"],
        help=f"of {', '.join(MODEL_SETS)}",
    )
    parser.add_argument(
        "--server-models",
        type=lambda s: s.split(","),
        default=["v5", "v6"],
        help="model sets also measured through our server",
    )
    parser.add_argument(
        "--server-engines",
        type=lambda s: s.split(","),
        default=["onnxruntime", "openvino"],
        help="engines also measured through our server",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="server level; 0 = none")
    args = parser.parse_args(argv)
    unknown = set(args.models) - set(MODEL_SETS)
    if unknown:
        parser.error(f"unknown model sets {sorted(unknown)}: one of {', '.join(MODEL_SETS)}")
    report = run(args)
    table = markdown(report, args.concurrency)
    (args.out / "results.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    (args.out / "results.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
