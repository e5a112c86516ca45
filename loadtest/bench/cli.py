"""`ocr-bench <scenario>`: every benchmark of the project behind one command.

One parser: the options scenarios share are defined once (`loadtest.bench.options`), each
scenario adds its own (`Scenario.add_arguments`). One results format under one report header:
`--out` gets `results.json`, `results.md` and the plots (`loadtest.bench.results`), headed by
the machine, its CPU flags, OpenVINO's capabilities, the commit and the machine's other load
during the run (`loadtest.bench.header`). `ocr-bench --help` lists the scenarios; `ocr-bench
SCENARIO --help` says what one measures and takes. `make bench` runs `ocr-bench choice`.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from loadtest.bench.header import CpuWatch, Header
from loadtest.bench.options import add_shared
from loadtest.bench.results import write
from loadtest.bench.scenario import SCENARIOS, Scenario

__all__ = ["DEFAULT_SCENARIO", "SCENARIO_MODULES", "build_parser", "main", "scenarios"]

SCENARIO_MODULES = (
    "loadtest.bench.choice",
    "loadtest.bench.baselines",
    "loadtest.bench.cpu_engines",
    "loadtest.bench.ocrmypdf_compare",
    "loadtest.bench.text_layers",
    "loadtest.bench.languages",
    "loadtest.bench.faithful_v6",
    "loadtest.bench.batching",
    "loadtest.bench.precision_check",
    "loadtest.bench.precision_layouts",
    "loadtest.bench.precision_startup",
    "loadtest.bench.int8_sensitivity",
    "loadtest.bench.no_bf16",
    "loadtest.bench.job_impact",
    "loadtest.bench.memory_peak",
    "loadtest.bench.cpu_cost",
    "loadtest.bench.stage_cost",
    "loadtest.bench.output_cost",
    "loadtest.bench.embed_memory",
)
"""The modules whose scenarios `ocr-bench` offers, in the order `--help` lists them."""

DEFAULT_SCENARIO = "choice"
"""What `make bench` runs."""


def scenarios() -> dict[str, type[Scenario]]:
    """Every scenario, by name (importing their modules registers them)."""
    for module in SCENARIO_MODULES:
        importlib.import_module(module)
    return dict(SCENARIOS)


def _description(cls: type[Scenario]) -> str:
    doc = sys.modules[cls.__module__].__doc__ or cls.help
    return doc.strip()


def build_parser() -> argparse.ArgumentParser:
    """The command line: a sub-command per scenario, each with the shared options it reads."""
    found = scenarios()
    parser = argparse.ArgumentParser(
        prog="ocr-bench",
        description=(__doc__ or "").strip().splitlines()[0],
        epilog=f"`make bench` runs `ocr-bench {DEFAULT_SCENARIO}`; BENCH_ARGS adds options.",
    )
    sub = parser.add_subparsers(dest="scenario", metavar="SCENARIO", required=True)
    for name, cls in found.items():
        scenario = cls()
        command = sub.add_parser(
            name,
            help=cls.help,
            description=_description(cls),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_shared(
            command,
            cls.shared,
            cls.defaults,
            servers=cls.servers,
            precisions=cls.precisions,
        )
        scenario.add_arguments(command)
        command.set_defaults(factory=cls)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one scenario and write its results; the exit status says whether it measured."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(arguments)
    scenario: Scenario = args.factory()
    if getattr(args, "out", None) is None:
        args.out = Path("bench-out") / scenario.name
    args.out.mkdir(parents=True, exist_ok=True)
    header = Header(scenario=scenario.name, command=shlex.join(["ocr-bench", *arguments]))
    watch = CpuWatch.start()
    results = scenario.run(args)
    header.load = watch.stop()
    written = write(args.out, header.as_dict(), args, results)
    print((args.out / "results.md").read_text())
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 1 if results.failed else 0


if __name__ == "__main__":
    sys.exit(main())
