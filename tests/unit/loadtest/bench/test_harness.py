"""`ocr-bench`'s harness: one parser, shared options defined once, one results format under one
header, and the Makefile's bench targets running it."""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from pathlib import Path
from typing import Any, ClassVar

import pytest

from loadtest.bench import cli, header, options, results
from loadtest.bench.scenario import SCENARIOS, Scenario, register

ROOT = Path(__file__).resolve().parents[4]


def test_help_lists_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    found = cli.scenarios()
    assert len(found) == len(cli.SCENARIO_MODULES)  # one scenario a module
    for name in found:
        assert re.search(rf"^\s+{re.escape(name)}\s", text, re.MULTILINE), name
    assert cli.DEFAULT_SCENARIO in found


HARNESS = {
    "__init__",
    "__main__",
    "cli",
    "scenario",
    "options",
    "header",
    "results",
    "common",
    # A scenario's own parts, imported by it:
    "baselines_report",
    "baseline_servers",
    "choice_report",
    "faster_paddle_peer",
    "ocrmypdf_tools",
}


def test_every_benchmark_module_is_a_scenario_or_a_part_of_the_harness() -> None:
    """A new measurement joins `ocr-bench` (a registered scenario in `cli.SCENARIO_MODULES`,
    with a smoke test) rather than growing a parser of its own."""
    modules = {p.stem for p in (ROOT / "loadtest" / "bench").glob("*.py")}
    listed = {name.rsplit(".", 1)[1] for name in cli.SCENARIO_MODULES}
    assert modules - HARNESS == listed, "add it to loadtest/bench/cli.py SCENARIO_MODULES"
    for module in modules - HARNESS - {"cli"}:
        text = (ROOT / "loadtest" / "bench" / f"{module}.py").read_text()
        assert "ArgumentParser(" not in text, f"{module}: its options go in add_arguments"


def test_every_scenario_has_help_and_takes_out() -> None:
    for name, cls in cli.scenarios().items():
        assert cls.name == name
        assert cls.help
        assert "out" in cls.shared
        assert set(cls.shared) <= set(options.SHARED), name
        assert set(cls.defaults) <= set(cls.shared), name


def test_a_shared_option_is_the_same_everywhere_and_refused_where_unread() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["baselines", "--pages", "6", "--levels", "1,4"])
    assert args.pages == 6
    assert args.levels == [1, 4]
    # host-cost reads no --servers: refused, not ignored.
    with pytest.raises(SystemExit):
        parser.parse_args(["host-cost", "--servers", "ours"])
    with pytest.raises(SystemExit):
        parser.parse_args(["baselines", "--pages", "0"])
    with pytest.raises(SystemExit):
        parser.parse_args(["baselines", "--servers", "ours,nobody"])


def test_scenario_defaults_override_the_shared_ones() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["baselines"]).levels == [1, 4, 8]
    assert parser.parse_args(["job-share"]).levels == [4]
    assert parser.parse_args(["host-cost"]).pages == options.SHARED["pages"].default
    assert parser.parse_args(["memory-peak"]).pages == 4
    assert parser.parse_args(["baselines"]).precision == ["int8", "f32"]
    assert parser.parse_args(["baselines", "--servers", ""]).servers == []


def test_a_second_scenario_of_the_same_name_is_refused() -> None:
    class Twin(Scenario):
        name = "baselines"
        help = "twin"

        def run(self, args: argparse.Namespace) -> results.Results:
            raise NotImplementedError

    cli.scenarios()
    with pytest.raises(ValueError, match="two scenarios named"):
        register(Twin)


HEADER: dict[str, Any] = {
    "scenario": "demo",
    "command": "ocr-bench demo --pages 2",
    "started": "2026-12-07T00:00:00+00:00",
    "commit": "abc123",
    "machine": {
        "host": "vm",
        "cpu_model": "AMD EPYC",
        "cpu_count": 2,
        "cpus_available": 2,
        "memory_gib": 23.5,
        "cpu_flags": ["avx2", "avx512_bf16"],
        "openvino": "2026.4.1",
        "openvino_capabilities": ["BF16", "FP32"],
        "python": "3.11",
    },
    "load": {
        "wall_s": 60.0,
        "cores_busy_this_run": 1.5,
        "cores_busy_other": 0.4,
        "load_1m_start": 1.0,
        "load_1m_end": 2.0,
    },
}


def test_the_header_says_machine_cpu_openvino_commit_and_load() -> None:
    text = header.markdown(HEADER)
    assert text.startswith("# ocr-bench demo, 2026-12-07")
    assert "- commit: abc123" in text
    assert "AMD EPYC, 2 CPUs (2 available to this run), 23.5 GiB" in text
    assert "CPU flags: avx2 avx512_bf16; OpenVINO 2026.4.1: BF16 FP32" in text
    assert "other processes kept 0.40 cores busy on average over the run's 60 s" in text


def test_cpu_flags_and_model_come_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Intel Xeon 8480\nflags\t\t: fpu avx2 amx_bf16 avx512f\n\n"
        "processor\t: 1\nmodel name\t: other\n"
    )
    assert header.cpu_model(cpuinfo) == "Intel Xeon 8480"
    assert header.cpu_flags(cpuinfo) == ["avx2", "avx512f", "amx_bf16"]
    assert header.cpu_flags(tmp_path / "missing") == []


def test_a_watch_counts_this_process_work_and_never_negative_others() -> None:
    watch = header.CpuWatch.start()
    total = sum(i * i for i in range(2_000_000))  # some CPU of our own
    load = watch.stop()
    assert total > 0
    assert load["cores_busy_this_run"] > 0
    assert load["cores_busy_other"] >= 0
    assert set(load) == {
        "wall_s",
        "cores_busy_this_run",
        "cores_busy_other",
        "load_1m_start",
        "load_1m_end",
    }


def test_results_are_json_markdown_and_plots_under_the_header(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    args = argparse.Namespace(out=tmp_path, pages=2, factory=object, scenario="demo")
    got = results.Results(
        data={"rows": [1, 2]},
        markdown="| a |\n",
        plots={"speed": results.bars("speed", "pages/s", {"ours": 1.0, "é": 0.5})},
    )
    written = results.write(tmp_path, HEADER, args, got)
    assert [p.name for p in written] == ["results.json", "results.md", "speed.png"]
    report = json.loads((tmp_path / "results.json").read_text())
    assert report["header"]["commit"] == "abc123"
    assert report["options"] == {"out": str(tmp_path), "pages": 2}
    assert report["results"] == {"rows": [1, 2]}
    text = (tmp_path / "results.md").read_text()
    assert text.startswith("# ocr-bench demo")
    assert text.endswith("| a |\n")
    assert (tmp_path / "speed.png").read_bytes().startswith(b"\x89PNG")


class _Demo(Scenario):
    name = "demo-harness"
    help = "a scenario of the harness' own test"
    shared = ("out", "pages")
    defaults: ClassVar[dict[str, Any]] = {"pages": 3}

    def run(self, args: argparse.Namespace) -> results.Results:
        return results.Results(data={"pages": args.pages}, markdown="done\n", failed=True)


def test_main_runs_a_scenario_writes_its_results_and_says_if_it_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    register(_Demo)
    monkeypatch.setattr(header, "commit", lambda root=header.REPO_ROOT: "abc")
    try:
        assert cli.main(["demo-harness", "--out", str(tmp_path)]) == 1  # it said it failed
    finally:
        SCENARIOS.pop("demo-harness")
    report = json.loads((tmp_path / "results.json").read_text())
    assert report["results"] == {"pages": 3}
    assert report["header"]["command"] == f"ocr-bench demo-harness --out {tmp_path}"
    assert report["header"]["load"]["wall_s"] >= 0
    assert "done" in capsys.readouterr().out


def test_ocr_bench_is_a_console_script_and_the_make_targets_run_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["ocr-bench"] == "loadtest.bench.cli:main"
    makefile = (ROOT / "Makefile").read_text()
    for target in ("bench", "bench-engines", "bench-ocrmypdf"):
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert "$(BIN)/ocr-bench" in recipe, target
    assert "python -m loadtest.bench." not in makefile
