"""The scheduling simulator: exact timelines on tiny scenarios, the real policy's decisions, and
the traffic and calibration it starts from. Every run here simulates minutes, never the hour."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from loadtest.sim.calibration import CPU_DET, CPU_REC
from loadtest.sim.config import SimConfig
from loadtest.sim.flow import SimRequest
from loadtest.sim.model import DeviceModel, Latency
from loadtest.sim.run import SimResult, Simulation
from loadtest.sim.scenarios import ScenarioOptions, build
from loadtest.sim.simulator import main
from loadtest.sim.traffic import PageSpec, TrafficConfig, TrafficSource
from serving.config import StageLimits
from serving.scheduling.priorities import BACKGROUND, INTERACTIVE
from tests.sim_configs import tiny_config

PAGE = PageSpec(det_h=32, det_w=32, lines=8, chunks=((6, 320), (2, 640)))
LIMITS = {
    "det": StageLimits(max_batch_size=1, max_cost=10**9),
    "rec": StageLimits(max_batch_size=24, max_cost=10**9),
    "cls": StageLimits(max_batch_size=24, max_cost=10**9),
}


def _device(name: str, det_s: float, rec_s: float, inflight: int = 1) -> DeviceModel:
    return DeviceModel(
        name=name,
        kind="gpu" if name.startswith("gpu") else "cpu",
        stages=("det", "rec"),
        limits=LIMITS,
        latency={"det": Latency(fixed_s=det_s), "rec": Latency(fixed_s=rec_s)},
        inflight_batches=inflight,
        jitter=0.0,
    )


def _config(*devices: DeviceModel, workers: int = 1, **changes: object) -> SimConfig:
    """No clients of its own (tests inject requests), no randomness in any time."""
    return tiny_config(*(devices or (_device("cpu", 1.0, 0.5),)), workers=workers, **changes)


Ended = list[tuple[str, str | None, float, float]]


def _inject(
    sim: Simulation,
    ended: Ended,
    at: float,
    priority: int = INTERACTIVE,
    cancel_after_s: float | None = None,
) -> None:
    """A one-page request at `at`; `ended` gets (kind, outcome, arrival, end) when it ends."""

    def answered(request: SimRequest) -> None:
        ended.append((request.kind, request.status, request.arrival, round(sim.loop.now, 6)))

    def start(_: object) -> None:
        sim.flow.start([PAGE], priority, cancel_after_s=cancel_after_s, on_end=answered)

    sim.loop.at(at, start)


def _rows(result: SimResult, device: str, stage: str) -> int:
    stats = result.recorder.batches.get((device, stage))
    return 0 if stats is None else stats.batches


def test_one_page_follows_the_servers_path_step_by_step() -> None:
    sim = Simulation(_config())
    ended: Ended = []
    _inject(sim, ended, 0.0)
    result = sim.run()
    # sizes 0-0.1, prepare 0.1-0.3, det 0.3-1.3, after_det 1.3-1.6, two rec chunks of different
    # widths (two buckets, two batches) 1.6-2.1-2.6, finish 2.6-2.7.
    assert ended == [("interactive", "ok", 0.0, 2.7)]
    assert _rows(result, "cpu", "det") == 1
    assert _rows(result, "cpu", "rec") == 2
    assert result.devices["cpu"][1] == pytest.approx(2.0)
    assert result.recorder.cpu_busy_s == pytest.approx(0.7)
    assert result.admission_page_s == pytest.approx(2.7)


def test_interactive_work_runs_first_and_holds_background_work_between_its_stages() -> None:
    sim = Simulation(_config())
    ended: Ended = []
    _inject(sim, ended, 0.0, BACKGROUND)
    _inject(sim, ended, 0.05, INTERACTIVE)
    result = sim.run()
    # The CPU pool runs the interactive calls first (0.1-0.2 sizes, 0.2-0.4 prepare) and the job
    # page's prepare after (0.4-0.6). Interactive det 0.4-1.4. The job page's det is the only
    # item queued at 1.4, but the interactive page is in its CPU step after det (1.4-1.7), which
    # will submit device work: the device holds the job's det (a batch is not preempted: taken at
    # 1.4 it would run to 2.4 and the interactive chunks would wait for it). Interactive rec: the
    # 320 px chunk 1.7-2.2, the 640 px one 2.2-2.7; finish 2.7-2.8. Then the job: det 2.7-3.7,
    # CPU 3.7-4.0, its chunks 4.0-4.5 and 4.5-5.0 (alone now), finish 5.0-5.1.
    assert ended == [
        ("interactive", "ok", 0.05, 2.8),
        ("background", "ok", 0.0, 5.1),
    ]
    assert _rows(result, "cpu", "rec") == 4
    assert result.recorder.batches[("cpu", "rec")].rows == {6: 2, 2: 2}
    assert result.devices["cpu"][1] == pytest.approx(4.0)


def test_shed_deadline_and_cancelled_requests_and_their_dropped_items() -> None:
    sim = Simulation(_config(max_inflight_pages=2, traffic=TrafficConfig(timeout_s=2.0)))
    ended: Ended = []
    _inject(sim, ended, 0.0)  # past its 2 s deadline at 2.0: 504 (it needs 2.7 s)
    _inject(sim, ended, 0.01, cancel_after_s=0.5)  # its client leaves at 0.51: det never runs
    _inject(sim, ended, 0.02)  # a third page in flight: over max_inflight_pages = 2, 503
    result = sim.run()
    assert ended == [
        ("interactive", "shed", 0.02, 0.02),
        ("interactive", "cancelled", 0.01, 0.51),
        ("interactive", "deadline", 0.0, 2.0),
    ]
    # Its det was queued (prepare ended at 0.5) and then dropped by `select`, never run.
    assert _rows(result, "cpu", "det") == 1
    assert result.recorder.dropped_items >= 1
    kinds = result.recorder.kinds["interactive"].outcomes
    assert kinds == {"shed": 1, "cancelled": 1, "deadline": 1}


def _fast_and_slow(placement: bool) -> SimResult:
    devices = (_device("gpu:0", 0.05, 0.02, inflight=2), _device("cpu", 1.0, 0.2))
    sim = Simulation(_config(*devices, workers=4, placement=placement))
    ended: Ended = []
    for k in range(40):  # bursts of 4 pages, as fast as the 4 CPU workers prepare them
        _inject(sim, ended, 0.2 * (k // 4))
    return sim.run()


def test_the_real_placement_keeps_detection_off_the_slow_device() -> None:
    placed = _fast_and_slow(placement=True)
    pulled = _fast_and_slow(placement=False)
    # Placement on: the CPU runs det once (a device never measured takes its batch: that is how
    # it is learnt), then leaves every page to the GPU. Off: it takes whatever it finds free.
    assert _rows(placed, "cpu", "det") == 1
    assert _rows(pulled, "cpu", "det") == 3
    assert placed.recorder.kinds["interactive"].outcomes == {"ok": 40}
    assert pulled.recorder.kinds["interactive"].outcomes == {"ok": 40}
    latencies = placed.recorder.kinds["interactive"].latencies_s
    assert max(latencies) < max(pulled.recorder.kinds["interactive"].latencies_s)
    assert placed.counts.selects > 0


def test_chunks_and_detector_shapes_are_cut_as_the_server_cuts_them() -> None:
    source = TrafficSource(TrafficConfig(), random.Random(1))
    widths = [100, 200, 300, 400, 500, 600, 700, 4000]
    assert source.chunks(widths) == ((6, 600), (2, 3200))
    assert source.chunks([50]) == ((1, 320),)
    bench = source.bench_page(0)
    assert (bench.det_h, bench.det_w) == (1664, 1280)
    assert bench.lines == 39
    rounded = TrafficSource(TrafficConfig(rec_width_multiple=64), random.Random(1))
    assert rounded.chunks([100, 700]) == ((2, 704),)


def test_poisson_arrivals_carry_the_asked_pages_per_second() -> None:
    config = TrafficConfig(rate_pages_s=20.0)
    source = TrafficSource(config, random.Random(7))
    t, pages = 0.0, 0
    while True:
        nxt = source.next_arrival(t)
        assert nxt is not None
        if nxt > 500.0:
            break
        t = nxt
        pages += source.next_request().pages
    assert pages / 500.0 == pytest.approx(20.0, rel=0.08)


def test_the_cpu_models_reproduce_the_readme_figures() -> None:
    assert CPU_REC.seconds(6 * 320, 6) == pytest.approx(0.104, rel=0.01)
    assert CPU_REC.seconds(6 * 960, 6) == pytest.approx(0.398, rel=0.01)
    assert CPU_DET.seconds(736 * 736, 1) == pytest.approx(0.118, rel=0.01)
    assert CPU_DET.seconds(1216 * 1568, 1) == pytest.approx(0.650, rel=0.01)


def test_this_machine_simulated_is_close_to_the_bench() -> None:
    # README: c=1 0.196 pages/s, p50 4.53 s; c=4 0.192-0.26 pages/s, p50 21.2 s.
    one = Simulation(build("cpu", ScenarioOptions(duration_s=900.0, concurrency=1))).run()
    stats = one.recorder.kinds["interactive"]
    assert 0.17 < stats.pages_done / one.recorder.window_s < 0.24
    assert 4.0 < sorted(stats.latencies_s)[len(stats.latencies_s) // 2] < 5.5


def test_the_cli_writes_summaries_and_plots(tmp_path: Path) -> None:
    assert main(["--config", "cpu,gpu", "--duration-s", "120", "--out", str(tmp_path)]) == 0
    overview = json.loads((tmp_path / "summary.json").read_text())
    assert [run["name"] for run in overview["runs"]] == ["cpu", "gpu"]
    gpu = overview["runs"][1]
    assert gpu["throughput_pages_s"] > 0
    assert gpu["devices"]["gpu:0"]["utilisation"] > 0
    assert gpu["background"]["requests"] > 0
    for name in ("cpu", "gpu"):
        assert (tmp_path / name / "summary.md").is_file()
        assert (tmp_path / name / "timeline.png").is_file()
    assert (tmp_path / "compare.png").is_file()


def test_the_big_configuration_is_built_but_only_run_for_seconds() -> None:
    config = build("8gpu-64cpu", ScenarioOptions(duration_s=3.0, placement=False))
    assert config.traffic.rate_pages_s == 1000.0
    assert len(config.devices) == 8
    assert config.cpu.workers == 64
    result = Simulation(replace(config, warmup_s=1.0)).run()
    outcomes = result.recorder.kinds["interactive"].outcomes
    assert outcomes["ok"] > 0
    assert outcomes["shed"] > 0  # 8 GPUs at the assumed speed cannot take 1,000 pages/s


def test_configurations_compared_see_the_same_requests() -> None:
    runs = [
        Simulation(build(name, ScenarioOptions(duration_s=120.0))).run()
        for name in ("gpu", "gpu+cpu-noplace")
    ]
    arrivals = [list(r.recorder.arrivals_bins) for r in runs]
    assert arrivals[0] == arrivals[1]
    assert sum(arrivals[0]) > 100
    requests = [sum(r.recorder.kinds["interactive"].outcomes.values()) for r in runs]
    assert requests[0] == requests[1]


def test_a_job_keeps_its_share_of_a_device_requests_keep_busy() -> None:
    """`cpu-c2+job`, 20 minutes: two closed-loop clients always have a page queued. With strict
    priority the job does nothing in the measured window; with `jobs.min_share` 0.1 about a tenth
    of the device's pages (4.8 s of device each), none past its deadline, and the requests give up
    about a tenth of theirs."""

    def run(share: float) -> SimResult:
        options = ScenarioOptions(duration_s=1200.0, job_min_share=share)
        return Simulation(build("cpu-c2+job", options)).run()

    strict, shared = run(0.0), run(0.1)
    assert strict.recorder.kinds["background"].pages_done == 0
    jobs = shared.recorder.kinds["background"]
    assert 15 <= jobs.pages_done <= 35
    assert "deadline" not in jobs.outcomes
    assert shared.job_pages_failed == 0
    kept = shared.recorder.kinds["interactive"].pages_done
    assert 0.85 <= kept / strict.recorder.kinds["interactive"].pages_done < 0.95
