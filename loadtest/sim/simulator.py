"""Scheduling simulator: the server's real batching, placement and admission code, driven by
simulated devices, CPU workers and traffic on a virtual clock.

    python -m loadtest.sim --config NAME[,NAME...] --duration-s 3600 --out sim-out

Configurations are in `loadtest.sim.scenarios` (`--list`); the options after them override every
configuration run. Each writes `OUT/NAME/summary.{json,md}` and plots; `OUT/summary.{json,md}`
and `OUT/compare.png` put them side by side.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtest.sim.calibration import GPU_PROFILES, H100_FP32_EAGER
from loadtest.sim.report import markdown_table, write_overview, write_run
from loadtest.sim.run import run_simulation
from loadtest.sim.scenarios import SCENARIOS, ScenarioOptions, build
from serving.config import BATCHING_SETTINGS, WorkersConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.sim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", default="cpu", help="names, comma-separated, or 'all'")
    parser.add_argument("--list", action="store_true", help="list the configurations and exit")
    parser.add_argument("--duration-s", type=float, default=3600.0, help="simulated traffic")
    parser.add_argument("--out", type=Path, default=Path("sim-out"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate-pages-s", type=float, help="open-loop interactive pages/s")
    parser.add_argument("--concurrency", type=int, help="closed-loop clients instead")
    parser.add_argument("--placement", choices=("on", "off"), help="placement by finish time")
    parser.add_argument("--max-inflight-pages", type=int, help="server.max_inflight_pages")
    parser.add_argument("--rec-max-wait-ms", type=float, help="workers.rec_queue.max_wait_ms")
    parser.add_argument("--gpu-inflight-batches", type=int, help="workers.gpu.inflight_batches")
    parser.add_argument("--gpu-queued-batches", type=int, help="workers.gpu.queued_batches")
    parser.add_argument(
        "--gpu-instances",
        type=int,
        default=WorkersConfig().gpu_instances,
        help="workers.gpu_instances: device workers per GPU, sharing it (one batch at a time)",
    )
    parser.add_argument("--inflight-pages-per-gpu", type=int, help="server.inflight_pages_per_gpu")
    parser.add_argument(
        "--gpu-profile",
        choices=GPU_PROFILES,
        default=H100_FP32_EAGER.name,
        help="assumed GPU speeds, device-thread costs (loadtest.sim.calibration: not measured)",
    )
    parser.add_argument(
        "--rec-width-multiple", type=int, help="what if rec chunk widths were rounded up"
    )
    parser.add_argument(
        "--batching",
        choices=BATCHING_SETTINGS,
        default="auto",
        help="[engine] batching; auto: bucketed where a GPU serves, as the server",
    )
    parser.add_argument("--job-pages", type=int, help="background job pages; -1: endless; 0: none")
    parser.add_argument("--job-max-inflight-pages", type=int, help="jobs.max_inflight_pages")
    parser.add_argument("--job-min-share", type=float, help="jobs.min_share; 0: strict priority")
    parser.add_argument(
        "--uncapped", action="store_true", help="ignore the duration caps of slow configurations"
    )
    parser.add_argument("--cpu-fifo", action="store_true", help="CPU pool first come, first served")
    return parser


def _names(value: str) -> list[str]:
    names = list(SCENARIOS) if value == "all" else [n.strip() for n in value.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown configuration(s): {', '.join(unknown)} (see --list)")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """Run the named configurations and write their reports."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.gpu_instances < 1:
        parser.error("--gpu-instances must be >= 1")
    if args.list:
        for name, factory in SCENARIOS.items():
            print(f"{name:18} {factory(ScenarioOptions()).description}")
        return 0
    options = ScenarioOptions(
        duration_s=args.duration_s,
        seed=args.seed,
        gpu=GPU_PROFILES[args.gpu_profile],
        rate_pages_s=args.rate_pages_s,
        concurrency=args.concurrency,
        placement=None if args.placement is None else args.placement == "on",
        max_inflight_pages=args.max_inflight_pages,
        rec_max_wait_ms=args.rec_max_wait_ms,
        gpu_inflight_batches=args.gpu_inflight_batches,
        gpu_queued_batches=args.gpu_queued_batches,
        gpu_instances=args.gpu_instances,
        inflight_pages_per_gpu=args.inflight_pages_per_gpu,
        cpu_priority=not args.cpu_fifo,
        rec_width_multiple=args.rec_width_multiple,
        batching=args.batching,
        job_max_inflight_pages=args.job_max_inflight_pages,
        job_min_share=args.job_min_share,
        job_pages=args.job_pages,
        uncapped=args.uncapped,
    )
    summaries: list[dict[str, Any]] = []
    for name in _names(args.config):
        config = build(name, options)
        capped = " (capped: --uncapped for more)" if config.duration_s < args.duration_s else ""
        print(
            f"simulating {name} for {config.duration_s:.0f} s{capped} ...",
            file=sys.stderr,
            flush=True,
        )
        result = run_simulation(config)
        summary, _ = write_run(result, args.out / name)
        summaries.append(summary)
        print(f"  done in {result.wall_s:.1f} s wall", file=sys.stderr, flush=True)
    command = "python -m loadtest.sim " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    write_overview(summaries, args.out, command)
    print(markdown_table(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
