"""The GPU check's report: which texts differ from what, the ratio the issue asks for, the table."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from loadtest.gpu import check as gpu_check
from loadtest.gpu import probes
from pipelines.types import ClsParams
from serving.config import WorkersConfig, load_config


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


def test_the_report_says_the_precision_asked_for_resolved_and_served() -> None:
    report = {**_report(texts_equal=True, top=25.0), "precision": "auto"}
    report["precision_resolved"] = "fp16"
    fell_back = "auto: fp16 autocast on a GPU; fell back to fp32: at fp16 the warm-up page read []"
    report["server"]["ready_devices"] = {
        "gpu:0": {"precision": "fp32", "precision_reason": fell_back}
    }
    report["summary"] = gpu_check.summary(report)
    assert report["summary"]["precision_served"] == {"gpu:0": f"fp32 ({fell_back})"}
    text = gpu_check.markdown(report)
    assert "# GPU check (gpu:0, torch, auto -> fp16)" in text
    assert f"run at, and why: {{'gpu:0': 'fp32 ({fell_back})'}}" in text


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
    assert config.workers.cpu_instances == WorkersConfig().cpu_instances  # the mixed run's CPU
    # A dry run's server: its CPU device stands for the GPU, with --gpu-instances workers.
    path.write_text(gpu_check.config_toml(args, ["cpu"]))
    assert load_config(path).workers.cpu_instances == 2
    args.gpu_instances = 1
    path.write_text(gpu_check.config_toml(args, ["cpu"]))
    assert load_config(path).workers.cpu_instances == 1
    args.gpu_instances = 2
    path.write_text(gpu_check.config_toml(args, ["gpu:0", "cpu"]))
    config = load_config(path)
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


def _junit(tmp_path: Path, *cases: str) -> Path:
    junit = tmp_path / "junit.xml"
    junit.write_text(
        f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>'
    )
    return junit


PASSED = '<testcase classname="tests.gpu.test_torch_gpu" name="test_overlap"/>'
PADDLE_SKIPPED = (
    '<testcase classname="tests.gpu.test_gpu_smoke" name="test_paddle_gpu">'
    '<skipped type="pytest.skip" message="not applicable: needs a GPU build of Paddle"/>'
    "</testcase>"
)
FP16_SKIPPED = (
    '<testcase classname="tests.gpu.test_torch_gpu" name="test_fp16">'
    '<skipped type="pytest.skip" message="fp16 (autocast) is for GPUs"/></testcase>'
)


def test_skipped_gpu_tests_are_reported_as_skipped_not_success(tmp_path: Path) -> None:
    junit = _junit(tmp_path, PASSED, PADDLE_SKIPPED, FP16_SKIPPED)
    out = tmp_path / "out"
    out.mkdir()
    gpu_check.save(_report(texts_equal=True, top=25.0), out, started=0.0)
    assert gpu_check.merge_tests(out, junit) == 0
    saved = json.loads((out / "gpu-check.json").read_text())
    assert saved["summary"]["tests"] == "incomplete: 1 passed, 1 skipped"
    text = (out / "gpu-check.md").read_text()
    assert "skipped tests.gpu.test_torch_gpu::test_fp16: fp16 (autocast) is for GPUs" in text
    assert gpu_check.junit_outcomes(tmp_path / "none.xml")["verdict"] == "not run"


def test_the_paddle_smoke_tests_that_always_skip_leave_the_verdict_passed(tmp_path: Path) -> None:
    """Issue 40: the GPU bundle has no Paddle, so its smoke tests always skip; counted as
    skipped, the verdict could never be "passed". Their skip says "not applicable"."""
    outcomes = gpu_check.junit_outcomes(_junit(tmp_path, PASSED, PADDLE_SKIPPED))
    assert outcomes["verdict"] == "passed"
    assert list(outcomes["not_applicable"]) == ["tests.gpu.test_gpu_smoke::test_paddle_gpu"]
    assert "1 not applicable: passed" in "\n".join(gpu_check.tests_markdown({"tests": outcomes}))
    only_skips = gpu_check.junit_outcomes(_junit(tmp_path, PADDLE_SKIPPED))
    assert only_skips["verdict"] == "not run"  # nothing passed proves nothing
    from tests.gpu import test_gpu_smoke

    (mark,) = (
        test_gpu_smoke.pytestmark
        if isinstance(test_gpu_smoke.pytestmark, list)
        else [test_gpu_smoke.pytestmark]
    )
    assert mark.kwargs["reason"].startswith(gpu_check.NOT_APPLICABLE)


def test_parts_run_in_order_while_the_budget_holds_them() -> None:
    assert list(gpu_check.PART_MIN_S)[:7] == [
        "syncs",
        "overlap",
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
    worker's predictors share one lane (`models.torch_backend.worker_lane`). With `pixels`, it
    takes uint8 (`stage_pixels`, as the torch engine) and keeps what it was launched with."""

    def __init__(self, inflight_batches: int, lane: Any = None) -> None:
        from types import SimpleNamespace

        from models.staging import Lane, lane_slots

        self.options = SimpleNamespace(inflight_batches=inflight_batches)
        self.lane = lane or Lane(_HostOps(), max_slots=lane_slots(inflight_batches))
        self.launched = 0
        self.inputs: list[tuple[Any, tuple[tuple[int, int], ...]]] = []

    def stage(self, shape: tuple[int, ...]) -> Any:
        return self.lane.stage(shape)

    def launch(self, slot: Any) -> None:
        self.launched += 1
        self.inputs.append((slot.input.dtype, slot.sizes))
        self.lane.launch(slot, lambda x: x * 2)

    def run(self, batch: Any) -> Any:
        return self.lane.run(batch, lambda x: x * 2)


class _PixelPredictor(_LanePredictor):
    def stage_pixels(self, shape: tuple[int, ...]) -> Any:
        import numpy as np

        return self.lane.stage(shape, np.uint8)


def _call(stage: str, rows: int, height: int, width: int, narrow: int = 0) -> Any:
    import numpy as np

    from loadtest.gpu.device_batches import DeviceCall
    from pipelines.pixels import Pixels

    data = np.full((rows, 3, height, width), 7, np.uint8)
    sizes = tuple((height, width - narrow) for _ in range(rows)) if narrow else ()
    return DeviceCall(stage, Pixels(data, sizes))  # type: ignore[arg-type]


def test_the_engine_limit_keeps_each_lane_within_its_slots() -> None:
    """Issue 40: the replay kept batches in flight per stage, while a worker's det and rec share
    one lane of `inflight_batches + 1` slots: with one in flight (the CPU's default), a det and a
    rec batch launched took both slots and the next refused ("all 2 slots are in use", the dry
    run's engine limit, which skipped the CPU side and the texts)."""
    from loadtest.gpu.device_batches import replay

    for inflight in (1, 2):
        det = _LanePredictor(inflight)
        rec = _LanePredictor(inflight, lane=det.lane)
        calls = [_call("det", 1, 8, 8)] + [_call("rec", 4, 4, 16)] * 5
        result = replay(
            {"det": det, "rec": rec},  # type: ignore[dict-item]
            calls * 3,
            pages=3,
            min_seconds=0.0,
        )
        assert result["batches_a_round"] == 18
        assert det.launched == 2 * 3  # the warm round and one measured round
        assert rec.launched == 2 * 15
        assert det.lane.slots <= inflight + 1
        assert result["uint8_in"] == {"det": False, "rec": False}


def test_the_engine_limit_launches_uint8_pixels_where_the_predictor_takes_them() -> None:
    """As a device worker: pixels straight into `stage_pixels` slots with each row's size (the
    device normalises them); float32 only for a predictor without it."""
    import numpy as np

    from loadtest.gpu.device_batches import replay

    det = _LanePredictor(2)
    rec = _PixelPredictor(2, lane=det.lane)
    result = replay(
        {"det": det, "rec": rec},  # type: ignore[dict-item]
        [_call("det", 1, 8, 8), _call("rec", 3, 4, 16, narrow=5)],
        pages=1,
        min_seconds=0.0,
    )
    assert result["uint8_in"] == {"det": False, "rec": True}
    assert rec.inputs[-1] == (np.dtype(np.uint8), ((4, 11),) * 3)
    assert det.inputs[-1][0] == np.dtype(np.float32)


def test_server_batches_group_the_pages_inputs_as_the_scheduler_would() -> None:
    """Issue 40: the engine limit replayed one page's det batch and that page's few rec rows at
    a time (launch-bound). Grouped as `[workers.gpu]` lets the scheduler: det by input size up
    to 8 pages, rec by width up to 96 rows and 96 x 1600 cost; each row keeps its size."""
    from loadtest.gpu.device_batches import server_batches
    from serving.config import WorkersConfig

    gpu = WorkersConfig().gpu
    limits = {"det": gpu.det, "rec": gpu.rec}
    pages = []
    for page in range(20):
        pages.append(_call("det", 1, 640, 512 if page % 2 else 640))
        pages += [_call("rec", 10, 48, 320, narrow=page % 3), _call("rec", 2, 48, 1600)]
    batches = server_batches(pages, limits)
    shapes = [(b.stage, *b.pixels.data.shape) for b in batches]
    assert shapes.count(("det", 8, 3, 640, 640)) == 1  # 10 pages of each size: 8 + 2
    assert shapes.count(("det", 2, 3, 640, 640)) == 1
    assert sorted(n for stage, n, *_ in shapes if stage == "det") == [2, 2, 8, 8]
    rec_320 = sorted(n for stage, n, _, _, w in shapes if stage == "rec" and w == 320)
    assert rec_320 == [20, 90, 90]  # 96 rows at most: 9 pages of 10 rows
    rec_1600 = sorted(n for stage, n, _, _, w in shapes if stage == "rec" and w == 1600)
    assert rec_1600 == [40]  # 40 x 1600 = 64,000 of 153,600
    assert sum(b.pixels.data.shape[0] for b in batches) == 20 * (1 + 12)
    first_320 = next(b for b in batches if b.stage == "rec" and b.pixels.data.shape[3] == 320)
    assert first_320.pixels.sizes[:20] == ((48, 320),) * 10 + ((48, 319),) * 10
    tiny = {"det": gpu.det, "rec": dataclasses.replace(gpu.rec, max_cost=320 * 25)}
    by_cost = server_batches(pages[:9], tiny)  # cost caps before rows do
    assert [b.pixels.data.shape[0] for b in by_cost if b.stage == "rec"][:1] == [20]


def test_a_round_holds_as_many_copies_of_each_page_as_a_det_batch_so_det_batches_fill() -> None:
    """Three pages of three sizes: one page at a time, or even all at once, no det batch holds
    more than one page; with 8 copies of each in flight (a load test's many requests over a few
    pages), every det batch is full, and rec rows of all copies share their width's batches."""
    from loadtest.gpu.device_batches import in_flight, server_batches
    from serving.config import WorkersConfig

    gpu = WorkersConfig().gpu
    limits = {"det": gpu.det, "rec": gpu.rec}
    pages = [
        [_call("det", 1, 640, width), _call("rec", 5, 48, 320), _call("rec", 1, 48, 960)]
        for width in (512, 640, 768)
    ]
    once = server_batches(in_flight(pages, 1), limits)
    assert [b.pixels.data.shape[0] for b in once if b.stage == "det"] == [1, 1, 1]
    full = server_batches(in_flight(pages, gpu.det.max_batch_size), limits)
    assert [b.pixels.data.shape[0] for b in full if b.stage == "det"] == [8, 8, 8]
    # 320 wide: 24 calls of 5 rows, 19 to a batch (96 rows at most); 960 wide: 24 of 1 row.
    assert sorted(b.pixels.data.shape[0] for b in full if b.stage == "rec") == [24, 25, 95]
    with pytest.raises(ValueError, match="copies"):
        in_flight(pages, 0)


def test_page_calls_keep_the_pipelines_uint8_inputs_in_bucketed_shapes() -> None:
    """Each model call's input as it would cross to a device worker: uint8, det padded to
    multiples of the step, rec crops to the width buckets; the page read as `run_page` reads it."""
    import numpy as np

    from loadtest.gpu.device_batches import page_calls
    from models.fake_predictor import FakePredictor
    from models.torch_options import TorchOptions
    from pipelines.ocr import run_page
    from pipelines.stages import MODEL_STAGES
    from pipelines.types import DetParams, RecParams
    from serving.request_options import OcrOptions

    torch = TorchOptions()
    options = OcrOptions(
        det=DetParams(pad_step_px=torch.det_step_px),
        rec=RecParams(pad_widths_px=torch.rec_widths_px),
        cls=None,
    )
    predictors = {"det": FakePredictor("det"), "rec": FakePredictor("rec", rec_indices=(1, 2))}
    for predictor in predictors.values():
        predictor.load()
    image = np.full((300, 500, 3), 255, np.uint8)
    charset = ["", "a", "b", *"cdefghij"]
    got = page_calls(predictors, MODEL_STAGES, image, options, charset)
    assert [c.stage for c in got.calls][:1] == ["det"]
    assert len(got.calls) >= 2
    for call in got.calls:
        assert call.pixels.data.dtype == np.uint8
        _, _, height, width = call.pixels.data.shape
        if call.stage == "det":
            assert height % torch.det_step_px == 0
            assert width % torch.det_step_px == 0
        else:
            assert width in torch.rec_widths_px
    assert list(got.maps) == [
        f"{got.calls[0].pixels.data.shape[2]}x{got.calls[0].pixels.data.shape[3]}"
    ]
    page = run_page(
        image,
        det=predictors["det"].run,
        rec=predictors["rec"].run,
        cls=None,
        det_params=options.det,
        rec_params=options.rec,
        cls_params=ClsParams(),
        charset=charset,
    )
    assert got.texts == [line.text for line in page.lines] != []


def test_busy_fraction_counts_the_compute_streams_time_over_a_steady_window() -> None:
    """Issue 40: `max(overlaps) > 0` passed a forward that syncs near its end; the busy share
    of the window from the second batch's compute to the last but one's does not."""
    from loadtest.gpu.overlap import BUSY_MIN, busy_fraction

    back_to_back = [(i * 10.0, i * 10.0 + 10.0) for i in range(6)]
    assert busy_fraction(back_to_back) == 1.0
    # Each batch waits 5 ms for the host after the one before: a third of the time idle.
    gapped = [(i * 15.0, i * 15.0 + 10.0) for i in range(6)]
    assert busy_fraction(gapped) == 40.0 / 55.0 < BUSY_MIN
    overlapping = [(0.0, 10.0), (8.0, 20.0), (18.0, 30.0), (28.0, 40.0), (38.0, 50.0)]
    assert busy_fraction(overlapping) == 1.0  # counted once
    assert busy_fraction(back_to_back[:3]) is None


def test_the_overlap_on_the_cpu_is_not_measured_not_passed(tmp_path: Path) -> None:
    report = _report(texts_equal=True, top=25.0)
    report["overlap"] = probes.overlap_check(argparse.Namespace(device="cpu"))
    s = gpu_check.summary(report)
    assert s["overlap"] == "not measured"
    report["summary"] = s
    assert "two batches in flight (>= 90% of a steady window): not measured" in (
        gpu_check.markdown(report)
    )
    report["overlap"] = {"measured": True, "passes": False, "rec": {"busy_fraction": 0.6}}
    assert gpu_check.summary(report)["overlap"] == "FAILED"


def test_levels_stay_within_the_servers_admission() -> None:
    """Issue 40: the headline ran at 128 clients where 64 pages were admitted (half 503s)."""
    assert gpu_check.levels_within([32, 64, 128], 64) == ([32, 64], [128])
    assert gpu_check.levels_within([32, 64, 128], 320) == ([32, 64, 128], [])
    assert gpu_check.levels_within([1, 2], None) == ([1, 2], [])


def test_texts_compared_at_one_batching_pass_equal_in_fp32_and_near_in_fp16(
    tmp_path: Path,
) -> None:
    """Issue 40: a bucketed device against exact-mode CPU texts failed for a reason unrelated
    to the device. Both sides now read bucketed; fp16 may differ within `FP16_CER_MAX`."""
    pages = tmp_path / "pages"
    pages.mkdir()
    expected = {"a": {"texts": ["hello world"] * 100}}
    cpu = [["hello world"] * 100]
    one_off = [["hello world"] * 99 + ["hello w0rld"]]
    args = argparse.Namespace(device="gpu:0", backend="torch", precision="fp32", pages=pages)
    gpu_check.cpu_texts = lambda _args, _images: cpu  # type: ignore[assignment]
    try:
        same = gpu_check.compare_texts(args, [], expected, cpu)
        assert (same["passes"], same["batching"], same["cer_vs_cpu"]) == (True, "bucketed", 0.0)
        fp32 = gpu_check.compare_texts(args, [], expected, one_off)
        assert fp32["passes"] is False  # fp32 reads exactly what the CPU reads
        args.precision = "fp16"
        fp16 = gpu_check.compare_texts(args, [], expected, one_off)
        assert fp16["cer_vs_cpu"] == round(1 / (100 * 11 + 99), 5)
        assert fp16["passes"] is True
        many = [["hallo warld"] * 100]
        assert gpu_check.compare_texts(args, [], expected, many)["passes"] is False
    finally:
        del gpu_check.cpu_texts


class _ClockEvent:
    """A timing event on the host clock (CUDA's `Event(enable_timing=True)` stand-in)."""

    def record(self, stream: Any = None) -> None:
        import time

        self.at = time.monotonic()

    def elapsed_time(self, other: _ClockEvent) -> float:
        return (other.at - self.at) * 1000


def test_compute_busy_streams_uint8_batches_two_in_flight_and_times_each_model_run() -> None:
    """The overlap part's loop, on a lane of host ops whose model run sleeps: every batch goes
    in as uint8 with its rows' sizes, two in flight, one timed interval a model run, and the
    lane's ops are given back."""
    import time

    import numpy as np

    from loadtest.gpu.overlap import compute_busy

    predictor = _PixelPredictor(2)
    ops = predictor.lane.ops

    def slow(x: Any) -> Any:
        time.sleep(0.02)
        return x * 2

    predictor.launch = lambda slot: predictor.lane.launch(slot, slow)  # type: ignore[method-assign]
    batch = np.zeros((4, 3, 8, 16), np.uint8)
    got = compute_busy(
        predictor,
        batch,
        batches=6,
        sizes=((8, 10),) * 4,
        new_event=_ClockEvent,
        synchronize=lambda: None,
    )
    assert predictor.lane.ops is ops
    assert (got["batches"], got["in_flight"], got["shape"]) == (6, 2, [4, 3, 8, 16])
    assert got["compute_ms"] >= 15
    # On the host each run is issued and done at once: the stream idles while the next is
    # collated, a little; the figure is computed, whatever it is, and bounded by 1.
    assert 0 < got["busy_fraction"] <= 1


def test_a_cut_run_of_the_script_leaves_the_benchmarks_log_and_needs_no_make(
    tmp_path: Path,
) -> None:
    """Issue 40: bench.log left only at the end, so a run the device tool cut returned none of
    it; it is now copied to $OUT every 5 s. A stand-in Python prints one part's line and hangs;
    the script's process group is then killed, as a cut run's is; and `make` (a stand-in
    that leaves a mark) is never called."""
    import os
    import signal
    import stat
    import subprocess
    import time

    root = Path(__file__).parents[4]
    bundle = tmp_path / "bundle"
    for need in ("models/det", "models/rec", "pages", "wheels"):
        (bundle / need).mkdir(parents=True)
    (bundle / "pages" / "expected.json").write_text("{}")
    (bundle / "manifest.json").write_text("{}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(
        "#!/bin/bash\n"
        'if [[ $1 == - ]]; then cat >/dev/null; echo "{}" >"$2"; exit 0; fi\n'
        "if [[ $* == *--merge-tests* ]]; then exit 0; fi\n"
        'echo "gpu_check: part syncs done"; exec sleep 120\n'
    )
    make = bin_dir / "make"
    make.write_text(f"#!/bin/bash\ntouch {tmp_path / 'make-called'}\nexit 99\n")
    for stub in (python, make):
        stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "out"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "OUT": str(out),
        "GPU_CHECK_WHEELS": "0",
        "GPU_CHECK_WORK": str(tmp_path / "work"),
    }
    argv = ["bash", "scripts/gpu-check.sh", "--bundle", str(bundle), "--python", str(python)]
    script = subprocess.Popen(
        [*argv, "--dry-run"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (out / "bench.log").is_file():
            time.sleep(0.5)
        time.sleep(1)
    finally:
        os.killpg(script.pid, signal.SIGKILL)
        script.wait()
    assert "part syncs done" in (out / "bench.log").read_text()
    assert not (tmp_path / "make-called").exists()
