"""PP-OCRv5 mobile against PP-OCRv6 small on the ONNX engines, side by side in one run.

For each engine and model set: accuracy (CER and word-level F1 against the PDFs' text layer) and
the in-process engine limit, the sets taking turns page by page so that their ratio is measured
under the same load, then our server's throughput at concurrency 4, one set after the other.
Real document pages rendered at 150 dpi (as `make bench`).

    python -m loadtest.bench.model_compare --out model-compare-out

Prints a Markdown table and writes results.json and results.md under --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.accuracy import WordCounts, char_edits, word_counts
from loadtest.documents import load_documents
from loadtest.engine_limit import real_page_set, write_page_set
from loadtest.run import run_level
from loadtest.servers import start_ours
from serving.config import load_config
from serving.cpus import available_cpus
from serving.engine.local import LocalEngine


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


def interleaved_limits(
    configs: dict[str, Path], images: Sequence[np.ndarray], names: Sequence[str], rounds: int
) -> dict[str, dict[str, Any]]:
    """The in-process engine limit of each configuration, page by page in turn.

    Every configuration's engine is loaded in this process; each page goes through all of them
    before the next page, in an order that rotates from page to page, so a change in the
    machine's load weighs on all of them alike. Each gets one untimed warm-up page.
    Returns, per configuration, its figures (as `loadtest.engine_limit`) and first-round texts.
    """
    engines = {key: LocalEngine(load_config(path)) for key, path in configs.items()}
    for engine in engines.values():
        engine.load()
        engine.ocr(images[0])
    times: dict[str, list[float]] = {key: [] for key in engines}
    texts: dict[str, dict[str, list[str]]] = {key: {} for key in engines}
    keys = list(engines)
    visit = 0
    for round_ in range(rounds):
        for name, image in zip(names, images, strict=True):
            shift = visit % len(keys)
            visit += 1
            for key in keys[shift:] + keys[:shift]:
                started = time.monotonic()
                lines = engines[key].ocr(image).lines
                times[key].append(time.monotonic() - started)
                if round_ == 0:
                    texts[key][name] = [line.text for line in lines]
    for engine in engines.values():
        for predictor in engine.predictors.values():
            predictor.close()
    return {
        key: {
            "pages": len(t),
            "pages_per_s": round(len(t) / sum(t), 4),
            "median_page_s": round(statistics.median(t), 4),
            "mean_page_s": round(statistics.fmean(t), 4),
            "texts": texts[key],
        }
        for key, t in times.items()
    }


MODEL_TIME_SHAPES = {
    "det": (1, 3, 1664, 1280),  # a 150-dpi letter page, padded to multiples of 32
    "rec 6x48x320": (6, 3, 48, 320),
    "rec 6x48x960": (6, 3, 48, 960),
}


def model_times(config: Path, repeats: int) -> dict[str, float]:
    """Seconds of one model run per input shape (the least of `repeats`, after a warm-up run):
    the models' own compute, no pre- or post-processing. The least is the figure a shared
    machine disturbs least."""
    engine = LocalEngine(load_config(config))
    engine.load()
    rng = np.random.default_rng(0)
    times = {}
    for name, shape in MODEL_TIME_SHAPES.items():
        predictor = engine.predictors[name.split()[0]]
        batch = rng.standard_normal(shape, dtype=np.float32)
        predictor.run(batch)
        runs = []
        for _ in range(repeats):
            started = time.monotonic()
            predictor.run(batch)
            runs.append(time.monotonic() - started)
        times[name] = round(min(runs), 4)
    return times


def alternating_model_times(
    configs: dict[str, Path], repeats: int, passes: int
) -> dict[str, dict[str, float]]:
    """`model_times` of each configuration, each in a process of its own, the configurations
    taking turns `passes` times; the least over the passes."""
    best: dict[str, dict[str, float]] = {}
    for _ in range(passes):
        for key, config in configs.items():
            argv = [sys.executable, "-m", "loadtest.bench.model_compare", "--model-times-of"]
            argv += [str(config), "--repeats", str(repeats)]
            done = subprocess.run(argv, check=True, capture_output=True, text=True)
            times = json.loads(done.stdout.strip().splitlines()[-1])
            previous = best.get(key, times)
            best[key] = {shape: min(t, previous[shape]) for shape, t in times.items()}
    return best


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
    threads = args.cpu_threads or available_cpus()
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
    images = [image for _, image, _ in page_set]
    names = [p.name for p in paths]
    for engine in args.engines:
        configs: dict[str, Path] = {}
        texts: dict[str, str] = {}
        for key in args.models:
            texts[key] = config_text(MODEL_SETS[key], engine, threads, out / "jobs")
            configs[key] = out / f"{engine}-{key}.toml"
            configs[key].write_text(texts[key])
        print(f"engine limits on {engine}, interleaved: {', '.join(configs)}...", file=sys.stderr)
        limits = interleaved_limits(configs, images, names, args.rounds)
        for key, limit in limits.items():
            run_: dict[str, Any] = {
                "engine": engine,
                "models": key,
                "label": MODEL_SETS[key].label,
                **accuracy(truths, limit.pop("texts")),
                "engine_limit": limit,
            }
            report["runs"].append(run_)
            print(json.dumps(run_), file=sys.stderr)
        if args.model_time_passes:
            print(f"model run times on {engine}...", file=sys.stderr)
            times = alternating_model_times(configs, args.repeats, args.model_time_passes)
            for run_ in report["runs"]:
                if run_["engine"] == engine:
                    run_["model_times_s"] = times[run_["models"]]
        if not args.concurrency or engine not in args.server_engines:
            continue
        for run_ in report["runs"]:
            if run_["engine"] == engine and run_["models"] in args.server_models:
                print(f"our server: {run_['label']} on {engine}...", file=sys.stderr)
                load = os.getloadavg()[0]
                run_["server"] = server_level(out, texts[run_["models"]], paths, args.concurrency)
                run_["server"]["load_average_before"] = load
                print(json.dumps(run_["server"]), file=sys.stderr)
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
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench.model_compare", description=__doc__
    )
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
        default=["v5", "v6"],
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
    parser.add_argument(
        "--model-time-passes",
        type=int,
        default=2,
        help="per engine: model run times, each set in its own process, sets taking turns",
    )
    parser.add_argument("--repeats", type=int, default=5, help="model runs per shape and pass")
    parser.add_argument("--model-times-of", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.model_times_of is not None:  # one process of `alternating_model_times`
        print(json.dumps(model_times(args.model_times_of, args.repeats)))
        return 0
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
