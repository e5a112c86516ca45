"""`ocr-batch --ray` with 1 and 2 actors per model on one local Ray, side by side on the same pages.

    python -m loadtest.bench.ray_scaling --pages 12 --out ray-out

Real pages (the bench's: text pages of Debian's manuals, rendered as PNGs) go through
`serving.batch.ray_driver.run_on_ray` once per actor count, alternating for `--rounds`, each into a
fresh output folder on the same Ray session. Reported per run: wall time from the call (actor
start-up and model loading included), steady pages/s (first page out to last), and whether the
texts equal the first run's. Writes `ray-scaling.json` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from loadtest.engine_limit import real_page_set, write_page_set


def _texts(out: Path) -> list[tuple[str, int, list[str]]]:
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return [(r["file"], r["page"], [ln["text"] for ln in r["lines"]]) for r in records]


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; 0 when every run did every page with the same texts."""
    import ray

    from serving.batch.ray_driver import ActorPools, run_on_ray

    parser = argparse.ArgumentParser(prog="python -m loadtest.bench.ray_scaling")
    parser.add_argument("--out", type=Path, default=Path("ray-out"))
    parser.add_argument("--pages", type=int, default=12)
    parser.add_argument("--dpi", type=float, default=150.0)
    parser.add_argument("--actors", default="1,2", help="actors per model, one run each")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--num-cpus",
        type=int,
        default=0,
        help="logical CPUs of the local Ray (default: room for the largest pools and their tasks)",
    )
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.actors.split(",")]
    pages = write_page_set(real_page_set(args.pages, args.dpi), args.out / "pages")
    # Each model actor reserves one logical CPU and runs one engine thread; CPU tasks a quarter.
    num_cpus = args.num_cpus or 2 * max(counts) + 2
    ray.init("local", num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING)
    runs: list[dict[str, Any]] = []
    reference: list[tuple[str, int, list[str]]] | None = None
    try:
        for round_index in range(args.rounds):
            for count in counts:
                out = args.out / f"run-{round_index}-{count}"
                shutil.rmtree(out, ignore_errors=True)
                pools = ActorPools(det=count, rec=count, cpus_per_actor=1.0, cpus_per_task=0.25)
                summary = run_on_ray([str(p) for p in pages], out, pools=pools, parquet=False)
                texts = _texts(out)
                reference = reference or texts
                first, last = summary.done_at_s[0], summary.done_at_s[-1]
                steady = (len(summary.done_at_s) - 1) / (last - first) if last > first else 0.0
                runs.append(
                    {
                        "round": round_index,
                        "actors_per_model": count,
                        "pages": len(summary.done),
                        "failed": len(summary.failures),
                        "wall_s": round(summary.elapsed_s, 1),
                        "first_page_s": round(first, 1),
                        "pages_per_s_wall": round(summary.pages_per_s, 3),
                        "pages_per_s_steady": round(steady, 3),
                        "texts_equal_first_run": texts == reference,
                    }
                )
                print(json.dumps(runs[-1]), file=sys.stderr)
    finally:
        ray.shutdown()
    report = {
        "command": " ".join(sys.argv),
        "cpu_count": os.cpu_count(),
        "ray_num_cpus": num_cpus,
        "pages": [p.name for p in pages],
        "dpi": args.dpi,
        "runs": runs,
    }
    (args.out / "ray-scaling.json").write_text(json.dumps(report, indent=1) + "\n")
    print(
        "| round | actors per model | pages | wall s | first page s | pages/s wall | "
        "pages/s steady | texts equal |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        print(
            f"| {r['round']} | {r['actors_per_model']} | {r['pages']} | {r['wall_s']} | "
            f"{r['first_page_s']} | {r['pages_per_s_wall']} | {r['pages_per_s_steady']} | "
            f"{r['texts_equal_first_run']} |"
        )
    ok = all(r["failed"] == 0 and r["texts_equal_first_run"] for r in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
