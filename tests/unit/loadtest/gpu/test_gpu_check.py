"""The GPU check's report: which texts differ from what, the ratio the issue asks for, the table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from loadtest.gpu import check as gpu_check
from serving.config import load_config


def test_text_differences_name_the_page_and_line() -> None:
    pages = ["a", "b", "c"]
    want = [["one", "two"], ["x"], ["same"]]
    got = [["one", "tw0"], ["x", "y"], ["same"]]
    assert gpu_check.text_differences(pages, want, got) == [
        {"page": "a", "line": 1, "want": "two", "got": "tw0"},
        {"page": "b", "lines": [1, 2]},
    ]
    assert gpu_check.text_differences(pages, want, want) == []


def _report(texts_equal: bool, top: float) -> dict[str, Any]:
    level = {
        "concurrency": 32,
        "throughput_pages_s": top,
        "p50_s": 0.5,
        "p95_s": 0.9,
        "metrics": {"det": {"mean_batch_size": 3.5}, "rec": {"mean_batch_size": 40.0}},
    }
    differences = (
        [] if texts_equal else [{"page": "dense", "line": 12, "want": "7oo9", "got": "7o09"}]
    )
    return {
        "device": "gpu:0",
        "backend": "torch",
        "precision": "fp32",
        "cpu_workers": 16,
        "torch": {"compile": "off", "shapes": "buckets"},
        "engine_limit": {"gpu": {"pages_per_s": 50.0}, "pipeline": {"pages_per_s": 12.0}},
        "server": {"devices": ["gpu:0"], "levels": [level]},
        "cpu_side": {"devices": ["gpu:0"], "levels": [{**level, "throughput_pages_s": 30.0}]},
        "texts": {
            "equal_to_cpu": texts_equal,
            "equal_to_paddle": False,
            "vs_cpu": differences,
            "vs_paddle": [{"page": "dense", "lines": [40, 39]}],
            "lines": 93,
            "here": {"opencv": "5.1.0", "numpy": "2.4.6"},
            "paddle_read_with": {"paddle": "3.2.2", "opencv": "4.10.0"},
        },
    }


def test_summary_bounds_the_server_by_the_slower_limit_and_needs_the_cpu_texts() -> None:
    report = _report(texts_equal=True, top=25.0)
    s = gpu_check.summary(report)
    assert s["ratio_to_bound"] == round(25.0 / 30.0, 3)  # the CPU side is the slower limit
    assert s["meets_0_8"] is True
    # The one-process pipeline (12 pages/s, CPU work inline) is not a bound.
    assert s["pipeline_one_process_pages_s"] == 12.0
    assert s["texts_equal_to_cpu"] is True
    assert gpu_check.summary(_report(texts_equal=True, top=20.0))["meets_0_8"] is False
    assert gpu_check.summary(_report(texts_equal=False, top=25.0))["texts_equal_to_cpu"] is False


def test_markdown_lists_what_read_differently_and_with_which_versions() -> None:
    report = _report(texts_equal=False, top=25.0)
    report["summary"] = gpu_check.summary(report)
    text = gpu_check.markdown(report)
    assert "equal to the same engine on this machine's CPU: False" in text
    assert "dense line 12: '7oo9' read '7o09'" in text
    assert "dense: 40 lines, read 39" in text
    assert "opencv 5.1.0" in text
    assert "paddle 3.2.2" in text
    assert "| server | gpu:0 | 32 | 25 |" in text
    report["launch"] = {
        "rec": {
            "shape": [96, 3, 48, 1280],
            "host_reads_free": True,
            "launch_ms": 0.9,
            "batch_ms": 41.0,
        }
    }
    assert "rec launch returns in 0.9 ms of a 41 ms batch (96, 3, 48, 1280)" in (
        gpu_check.markdown(report)
    )


def test_the_servers_config_loads(tmp_path: Path) -> None:
    args = argparse.Namespace(
        models=tmp_path / "models",
        backend="torch",
        cpu_backend="torch",
        precision="fp16",
        cpu_threads=2,
        gpu_instances=2,
        cpu_workers=8,
        out=tmp_path / "out",
        work=tmp_path / "work",
        torch_compile="reduce-overhead",
        torch_shapes="buckets",
    )
    path = tmp_path / "server.toml"
    path.write_text(gpu_check.config_toml(args, ["gpu:0", "cpu"]))
    config = load_config(path)
    assert config.workers.devices == ("gpu:0", "cpu")
    assert config.workers.gpu_instances == 2
    assert config.engine.precision == "fp16"
    assert config.engine.gpu_backend == "torch"
    assert (config.engine.torch.compile, config.engine.torch.shapes) == (
        "reduce-overhead",
        "buckets",
    )
    assert config.models.det == str((tmp_path / "models" / "det").resolve())
    # The bundle's det and rec alone (Paddle read the pages with them): no page classifier,
    # no other model set, which the bundle does not carry.
    assert (config.models.ori, config.models.sets) == ("", {})
    args.device = "gpu:0"
    models = gpu_check.app_config(args).models
    assert (models.ori, models.sets) == ("", {})


def test_read_with_is_optional(tmp_path: Path) -> None:
    assert gpu_check.read_with(tmp_path) is None
    (tmp_path / gpu_check.READ_WITH_FILE).write_text(json.dumps({"paddle": "3.2.2"}))
    assert gpu_check.read_with(tmp_path) == {"paddle": "3.2.2"}


def test_a_report_cut_short_still_renders(tmp_path: Path) -> None:
    """After the engine limit alone, with the server run failed: what the GPU run saves."""
    report = _report(texts_equal=True, top=25.0)
    del report["server"], report["cpu_side"]
    report["errors"] = {"server": "TimeoutError: server not ready after 300 s"}
    gpu_check.save(report, tmp_path, started=0.0)
    saved = json.loads((tmp_path / "gpu-check.json").read_text())
    assert saved["summary"]["ratio_to_bound"] is None
    assert saved["summary"]["meets_0_8"] is False
    assert saved["summary"]["tests"] == "not run"
    assert "the server run failed: TimeoutError" in (tmp_path / "gpu-check.md").read_text()


def test_a_level_lasts_about_level_seconds_at_the_engine_limit() -> None:
    args = argparse.Namespace(requests=64, level_seconds=15.0)
    assert gpu_check.level_requests(args, 32, pace_pages_s=40.0) == 600
    assert gpu_check.level_requests(args, 32, pace_pages_s=0.2) == 64
    assert gpu_check.level_requests(args, 64, pace_pages_s=0.2) == 128  # two a client


def test_the_check_writes_its_few_files_only_directly_under_out(tmp_path: Path) -> None:
    """The device tool returns 8 files, 16 MiB each, no deeper than $OUT/a/b/file: everything
    goes into `OUT_FILES` (the script adds 3), logs cut to their ends, whatever the servers
    wrote."""
    out = tmp_path / "out"
    out.mkdir()
    work = tmp_path / "work"
    logs = {}
    for name in ("server", "cpu_side", "mixed"):
        (work / name).mkdir(parents=True)
        (work / name / "server.log").write_text(
            "".join(f"{name} line {i}\n" for i in range(200_000))
        )
        logs[name] = gpu_check.log_tail(work / name / "server.log")
    report = _report(texts_equal=True, top=25.0)
    report["skipped"] = {"texts": "time: 3 s of the budget left, needs 20 s"}
    gpu_check.save(report, out, started=0.0, logs=logs)
    written = sorted(p.name for p in out.rglob("*"))
    assert written == sorted(gpu_check.OUT_FILES)
    assert all(p.is_file() for p in out.iterdir())  # no folders
    assert len(gpu_check.OUT_FILES) + 3 <= 8  # env.json, gpu-tests.log, bench.log
    logs_txt = (out / "logs.txt").read_text()
    assert len(logs_txt.encode()) <= gpu_check.LOGS_MAX_BYTES
    assert "mixed line 199999" in logs_txt  # the end of each log is kept
    assert "server line 0\n" not in logs_txt
    assert "skipped texts: time" in (out / "gpu-check.md").read_text()


def test_skipped_gpu_tests_are_reported_as_skipped_not_success(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.gpu.test_torch_gpu" name="test_overlap"/>'
        '<testcase classname="tests.gpu.test_gpu_smoke" name="test_paddle_gpu">'
        '<skipped type="pytest.skip" message="needs a GPU build of Paddle"/></testcase>'
        "</testsuite></testsuites>"
    )
    out = tmp_path / "out"
    out.mkdir()
    gpu_check.save(_report(texts_equal=True, top=25.0), out, started=0.0)
    assert gpu_check.merge_tests(out, junit) == 0
    saved = json.loads((out / "gpu-check.json").read_text())
    assert saved["summary"]["tests"] == "incomplete: 1 passed, 1 skipped"
    text = (out / "gpu-check.md").read_text()
    assert "skipped tests.gpu.test_gpu_smoke::test_paddle_gpu: needs a GPU build of Paddle" in text
    assert gpu_check.junit_outcomes(tmp_path / "none.xml")["verdict"] == "not run"


def test_parts_run_in_order_while_the_budget_holds_them() -> None:
    assert list(gpu_check.PART_MIN_S)[:6] == [
        "syncs",
        "engine_limit",
        "server",
        "cpu_side",
        "mixed",
        "texts",
    ]
    args = argparse.Namespace(device="gpu:0", backend="torch")
    report: dict[str, Any] = {"engine_limit": {}}
    assert gpu_check.skip_reason("server", args, report, set(), left_s=300.0) is None
    assert "budget" in str(gpu_check.skip_reason("server", args, report, set(), left_s=10.0))
    assert gpu_check.skip_reason("texts", args, {}, set(), left_s=300.0) is not None
    assert gpu_check.skip_reason("mixed", args, report, {"mixed"}, left_s=300.0) == "--skip"


class _HostOps:
    """`models.staging.DeviceOps` on the host: the work is done when it is issued."""

    def new_stream(self) -> None:
        return None

    def pinned_host(self, nbytes: int) -> Any:
        import numpy as np

        return np.empty(nbytes, dtype=np.uint8)

    def record(self, stream: Any) -> _HostOps:
        return self

    def synchronize(self) -> None:
        return None

    def wait(self, stream: Any, event: Any) -> None:
        return None

    def upload(self, host: Any, stream: Any) -> Any:
        return host.copy()

    def compute(self, fn: Any, x: Any, stream: Any) -> Any:
        return fn(x)

    def output_shape(self, y: Any) -> tuple[int, ...]:
        return tuple(y.shape)

    def download(self, y: Any, host: Any, stream: Any) -> None:
        host[...] = y


class _LanePredictor:
    """A staged predictor on a lane of `inflight_batches + 1` slots, as a device worker's; the
    worker's predictors share one lane (`models.torch_backend.worker_lane`)."""

    def __init__(self, inflight_batches: int, lane: Any = None) -> None:
        from types import SimpleNamespace

        from models.staging import Lane, lane_slots

        self.options = SimpleNamespace(inflight_batches=inflight_batches)
        self.lane = lane or Lane(_HostOps(), max_slots=lane_slots(inflight_batches))
        self.launched = 0

    def stage(self, shape: tuple[int, ...]) -> Any:
        return self.lane.stage(shape)

    def launch(self, slot: Any) -> None:
        self.launched += 1
        self.lane.launch(slot, lambda x: x * 2)

    def run(self, batch: Any) -> Any:
        return self.lane.run(batch, lambda x: x * 2)


def test_the_engine_limit_keeps_each_lane_within_its_slots() -> None:
    """Issue 40: the replay kept batches in flight per stage, while a worker's det and rec share
    one lane of `inflight_batches + 1` slots: with one in flight (the CPU's default), a det and a
    rec batch launched took both slots and the next refused ("all 2 slots are in use", the dry
    run's engine limit, which skipped the CPU side and the texts)."""
    import numpy as np

    for inflight in (1, 2):
        det = _LanePredictor(inflight)
        rec = _LanePredictor(inflight, lane=det.lane)
        calls = [("det", np.ones((1, 3, 8, 8), np.float32))]
        calls += [("rec", np.ones((4, 3, 4, 16), np.float32))] * 5
        calls *= 3
        result = gpu_check.device_limit(
            {"det": det, "rec": rec},  # type: ignore[dict-item]
            calls,
            pages=3,
            min_seconds=0.0,
        )
        assert result["batches_a_round"] == 18
        assert det.launched == 2 * 3  # the warm round and one measured round
        assert rec.launched == 2 * 15
        assert det.lane.slots <= inflight + 1
