"""The GPU check's dry run, in `make test` (issue 40): `scripts/gpu-check.sh --dry-run` on the
CPU with tiny settings, on a bundle made here of the converted det and rec and one synthetic
page, so that a part of the check that breaks (the engine limit's "all 2 slots are in use", a
server that no longer starts with the check's config) fails CI instead of the one GPU run.
Its figures mean nothing; what is asserted is that every part ran and the output stays within
what the device tool brings back (at most 8 files, none in a folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from models import convert
from models.bundle import load_bundle
from serving.config import EngineConfig
from tests import images
from tests.conftest import ONE_SET
from tests.gpu.bundle import copy_models

pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")

ROOT = Path(__file__).parents[2]
PARTS = ("syncs", "overlap", "engine_limit", "server", "cpu_side", "texts", "launch", "warmup")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = ROOT / EngineConfig().onnx_dir
    specs = load_bundle(ONE_SET.det, ONE_SET.rec)  # the bundle's: PP-OCRv5 mobile
    if any(convert.find_onnx(s, cache) is None for s in (specs.det, specs.rec)):
        pytest.skip(f"no ONNX conversions in {cache}: run {convert.CONVERT_COMMAND}")
    out = tmp_path_factory.mktemp("gpu-bundle")
    copy_models(out / "models", cache)
    pages = out / "pages"
    pages.mkdir()
    page = images.latin_lines()
    (pages / "latin.png").write_bytes(images.encode_png(page.image))
    expected = {"latin": {"file": "latin.png", "texts": list(page.lines)}}
    (pages / "expected.json").write_text(json.dumps(expected), "utf-8")
    (out / "wheels").mkdir()  # the project's venv has the packages (GPU_CHECK_WHEELS=0)
    (out / "manifest.json").write_text("{}", "utf-8")
    return out


def test_the_gpu_checks_dry_run_runs_every_part(bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {
        **os.environ,
        "OUT": str(out),
        "GPU_CHECK_WHEELS": "0",
        "GPU_CHECK_WORK": str(tmp_path / "work"),
        "GPU_CHECK_BUDGET_S": "420",
    }
    argv = ["bash", "scripts/gpu-check.sh", "--bundle", str(bundle), "--python", sys.executable]
    argv += ["--dry-run", "--", "--concurrency", "1", "--requests", "2", "--max-pages", "1"]
    argv += ["--cpu-workers", "1"]  # its two servers' page decoding: one page at a time here
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    report_file = out / "gpu-check.json"
    assert report_file.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_file.read_text("utf-8"))
    bench_log = (out / "bench.log").read_text("utf-8", errors="replace")
    assert not report.get("errors"), bench_log[-4000:]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for part in PARTS:
        assert part in report, (part, report.get("skipped"), bench_log[-2000:])
    limit = report["engine_limit"]["gpu"]
    assert limit["pages_per_s"] > 0
    assert limit["uint8_in"] == {"det": True, "rec": True}  # stage_pixels, as the server
    assert report["texts"]["equal_to_cpu"] is True
    assert report["texts"]["passes"] is True
    assert report["texts"]["batching"] == report["server"]["batching"] == "bucketed"
    # No CUDA events on the CPU: the overlap is reported as not measured, never as passed.
    assert report["summary"]["overlap"] == "not measured"
    assert report["server"]["admission"]["max_pages"] >= 1
    assert report["summary"]["levels_over_admission"] == []
    assert set(report["warmup"]) >= {"det", "rec"}
    # The check runs the default precision ("auto") and says what it resolved to: fp32 on the CPU.
    assert (report["precision"], report["precision_resolved"]) == ("auto", "fp32")
    served = report["summary"]["precision_served"]
    assert served, report["server"].get("ready_devices")
    assert all(v.startswith("fp32 (auto: ") for v in served.values()), served
    # One level (concurrency 1) of at least --requests (2), more where the engine limit's pace
    # asks for more (`level_requests`), every one answered.
    (level,) = report["server"]["levels"]
    assert level["successes"] == level["requests"] >= 2
    files = list(out.iterdir())
    assert {"env.json", "bench.log", "gpu-tests.log", "logs.txt"} <= {f.name for f in files}
    assert len(files) <= 8
    assert all(f.is_file() for f in files)
