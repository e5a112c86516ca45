"""A short `make soak` in CI: ocr-serve under real pages of varying sizes leaks nothing.

`loadtest.soak` starts the real server (embedded models, CPU, one core's worth of workers:
`ONE_CORE`), drives two clients for 70 s (more where its warm-up's requests take longer) and
samples every process each 2 s. Memory is judged with a looser bound than the 5 % of the full
soak; see MAX_GROWTH. About 90 s on 2 cores (2026-12-07, alone: 98 CPU s, the server +0.1 %).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from loadtest.soak.run import DEFAULT_CONFIG, main

DURATION_S = 70
WARMUP_S = 25
WARMUP_REQUESTS = 16
"""The warm-up ends after 25 s and 16 requests answered, whichever comes last; 45 s are judged
after it. On this AMD EPYC (2 cores) two clients got 12 to 19 requests answered in 25 s at the
auto precision (four runs, 33 to 54 in 70 s), but 9 or so at f32 forced beside the suite's other
worker, where the soak failed once (+27.6 %, its device workers still taking new shapes in what
it judged): the same warm-up is now the same requests on every machine."""
# A 70 s run judges 45 s: windows of 3 samples (a tenth of 22, rounded up), 6 s each, the windows
# the measured 90 s runs below had over their 60 s (shortened for the suite's time, issue 47),
# against a device worker whose RSS swings by 10 % with the page in flight. Three runs on 2 cores
# measured the server's growth at -6.3 %, +3.4 % and +0.7 % (the largest process +0.0 %, +2.9 %
# and +2.4 % of the server): within 5 %, but with a spread as wide as the bound itself, so 5 %
# would fail now and then with no leak. 15 % keeps twice that spread as margin; it still catches
# a leak of about 250 MiB a minute. The full
# `make soak` (20 minutes, 8 of warm-up, windows of 72 s) judges 5 %.
MAX_GROWTH = 0.15

ONE_CORE = """cpu_instances = 1
cpu_workers = 1
[engine]
cpu_threads = 1
cpu_lone_threads = 1
"""
"""The soaked server on one core of the two (its `[workers]` table goes on): one device worker
and one CPU worker, one math thread. With the defaults (two device workers, lone batches on
both cores) it took 116 CPU s of the suite's 2 cores in its 80 s, starving the other pytest
worker; a leak shows in one worker as in two, and one worker sees every warm-up request's
shapes (2026-12-07)."""


def test_short_soak_answers_everything_and_leaks_nothing(tmp_path: Path) -> None:
    """Every request 200; no segment left idle or after stop; fds flat; memory within bounds."""
    out = tmp_path / "soak"
    # The soak's pages are read by the default set: a second one would only lengthen the start
    # of both device workers, and hold memory that dilutes the growth measured against it.
    config = tmp_path / "soak.toml"
    config.write_text(DEFAULT_CONFIG + ONE_CORE + "[models]\nsets = {}\n")
    started = time.monotonic()
    code = main(
        [
            "--config",
            str(config),
            "--out",
            str(out),
            "--duration-s",
            str(DURATION_S),
            "--warmup-s",
            str(WARMUP_S),
            "--warmup-requests",
            str(WARMUP_REQUESTS),
            "--sample-s",
            "2",
            "--concurrency",
            "2",
            "--pages",
            "4",
            "--lone-requests",  # the pages at the largest factor alone; no time for more
            "4",
            "--max-growth",
            str(MAX_GROWTH),
            "--no-progress",
        ]
    )
    elapsed_s = time.monotonic() - started
    data = json.loads((out / "soak.json").read_text())
    verdicts = {c["name"]: c for c in data["criteria"]}
    report = (out / "soak.md").read_text()
    assert code == 0, report

    result = data["result"]
    assert result["requests"] >= WARMUP_REQUESTS + 6, report
    assert data["warmup_s"] >= WARMUP_S
    assert data["end_s"] == data["warmup_s"] + DURATION_S - WARMUP_S
    assert result["successes"] == result["requests"], result["errors"]
    assert verdicts["segments idle"]["passed"], report
    assert data["idle_segments"] == 0
    assert data["stop_segments"] == 0
    assert verdicts["fd growth"]["passed"], report
    assert all(p["fd_growth"] <= 4 for p in data["processes"])
    assert verdicts["processes"]["passed"], report
    assert verdicts["memory growth"]["passed"], report
    assert data["total"]["fraction"] < MAX_GROWTH

    roles = {p["role"] for p in data["processes"]}
    # Every kind of process the server runs is sampled (`ONE_CORE`: one of each worker).
    assert {"main", "device cpu", "cpu-worker 1", "resource-tracker"} <= roles, roles
    assert data["server"]["mkldnn_cache_capacity"] == 10
    assert data["distinct_sizes"] >= result["requests"] - 1  # sizes vary request by request
    samples = data["samples"]
    assert len(samples) >= DURATION_S // 2
    assert all(len(s["processes"]) >= 4 for s in samples)
    assert all(p["rss_mean_bytes"] > 0 and p["fds"] > 0 for s in samples for p in s["processes"])
    assert "| main |" in report
    assert (out / "soak.png").stat().st_size > 10_000
    print(f"short soak: {elapsed_s:.0f} s; {report}")
