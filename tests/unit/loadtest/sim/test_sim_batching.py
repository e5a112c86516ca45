"""The simulator's traffic in bucketed batching (`[engine] batching`): pages padded as the server
pads them, so the scheduler sees the bucketed engine's shapes and costs; "auto" resolves as the
server does (bucketed where a GPU serves)."""

from __future__ import annotations

import random

from loadtest.sim.scenarios import ScenarioOptions, build
from loadtest.sim.traffic import PageSpec, TrafficConfig, TrafficSource
from models.torch_options import TorchOptions
from serving.scheduling.batch_shapes import BatchingMode

WIDTHS = TorchOptions().rec_widths_px


def _pages(batching: BatchingMode, n: int = 200) -> list[PageSpec]:
    source = TrafficSource(TrafficConfig(batching=batching), random.Random(3))
    return [source.page() for _ in range(n)]


def test_bucketed_pages_have_the_bucketed_engines_shapes() -> None:
    exact, bucketed = _pages("exact"), _pages("bucketed")
    for plain, padded in zip(exact, bucketed, strict=True):
        assert padded.lines == plain.lines
        assert sum(rows for rows, _ in padded.chunks) == plain.lines
        assert all(width in WIDTHS for _, width in padded.chunks)
        assert padded.det_h % 128 == 0
        assert padded.det_w % 128 == 0
        assert plain.det_h <= padded.det_h < plain.det_h + 128
        assert plain.det_w <= padded.det_w < plain.det_w + 128
    # Few shapes in bucketed mode, many in exact mode: what lets batches fill.
    exact_widths = {w for page in exact for _, w in page.chunks}
    bucketed_widths = {w for page in bucketed for _, w in page.chunks}
    assert len(bucketed_widths) <= len(WIDTHS) < len(exact_widths)
    assert len({(p.det_h, p.det_w) for p in bucketed}) < len({(p.det_h, p.det_w) for p in exact})


def test_auto_batching_is_bucketed_where_a_gpu_serves() -> None:
    assert build("gpu", ScenarioOptions()).traffic.batching == "bucketed"
    assert build("gpu+cpu", ScenarioOptions()).traffic.batching == "bucketed"
    assert build("cpu", ScenarioOptions()).traffic.batching == "exact"
    assert build("gpu", ScenarioOptions(batching="exact")).traffic.batching == "exact"
