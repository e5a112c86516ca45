"""Default latency models: the CPU figures measured on this machine, the GPU ones assumed.

CPU device (Paddle 3.2.2 with oneDNN, 2 math threads), from the README's Performance section,
table "Why Paddle 3.2.2" (`loadtest/bench/engine_variants.py`, median ms, 2026-12-03, idle machine):

- det 1x3x736x736: 118 ms; 1x3x960x1248: 265 ms; 1x3x1216x1568: 650 ms. Fitted through the
  smallest and the largest as `a * px + b * px**2` (a = 1.690e-7 s/px, b = 9.016e-14 s/px²): a
  1248x1760 page (A4 at 150 dpi) takes 0.81 s; the middle point comes out at 332 ms (25% over).
- rec 6x3x48x320: 104 ms; 6x3x48x960: 398 ms. Fitted per row as `c1 * w + c2 * w**2`
  (c1 = 4.670e-5 s/px, c2 = 2.333e-8 s/px²): 6x48x1800 gives 0.96 s, where the README says "a
  chunk of 6 crops at width ~1800 takes ~1 s".
- The in-process engine limit of the bench's 8 pages: median page 4.50 s, 0.208-0.237 pages/s
  (`loadtest/engine_limit.py`, README table); `BENCH_PAGES` below, run through these models,
  gives its own figure to compare (`python -m loadtest.sim --config cpu`).

CPU workers (single-threaded calls), measured on 2026-12-05 with `python -m loadtest.bench.cpu_cost
--pages 4` (CPU time of the calling thread, on a shared 2-core machine; bench pages at 150 dpi,
2.2 Mpx, 29 lines): since issue 31 pixels cross shared memory as uint8 (22.6 MB a page, from
62.7 MB as float32), the detection map comes back as float16, and the CPU worker reads the page,
map and crops in place. Per page: prepare (decode, det resize, page and pixels into shared
memory) 55 ms (77 ms before), after_det (DB postprocess, crops, rec resize) 49 ms (73 ms), finish
(CTC decode, word boxes, assembly) 20 ms. The device worker's host side of a detection batch
(collate, normalise, the map out as float16): 30 ms a page (19 ms before, when the CPU workers
normalised).

GPU: no GPU was measured here. Its latencies are parameters (`GpuAssumptions`): by default one
page's detection 30x and one 6-crop chunk's recognition 10x faster than on the 2-thread CPU
device; larger batches cost only the variable part per item (half of a page's time for det, a
fifth of a chunk's for rec: a GPU is underused by one item); copies at 10 GB/s, which overlap
compute when a worker holds two batches. Change them with `--gpu-det-speedup`,
`--gpu-rec-speedup`, `--gpu-det-fixed-share` and `--gpu-rec-fixed-share`.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadtest.sim.model import CpuModel, CpuStep, DeviceModel, Latency
from serving.config import DeviceClassConfig, StageLimits, WorkersConfig

CPU_DET = Latency(per_unit_s=1.690e-7, per_unit_sq_s=9.016e-14)
"""2-thread CPU device, detection: README 118 ms at 736x736 and 650 ms at 1216x1568."""
CPU_REC = Latency(per_unit_s=4.670e-5, per_unit_sq_s=2.333e-8)
"""2-thread CPU device, recognition: README 104 ms at 6x48x320 and 398 ms at 6x48x960."""
CPU_TRANSFER = Latency(fixed_s=0.0005, per_unit_s=3e-9)
"""The device worker's side of shared memory and the pipe, for a rec batch."""
CPU_DET_TRANSFER = Latency(fixed_s=0.0005, per_unit_s=1.2e-8)
"""The device worker's side of a det batch: uint8 pixels collated and normalised, the map out as
float16 (30 ms for a 2.2 Mpx page, `loadtest.bench.cpu_cost`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuAssumptions:
    """How fast a GPU is against the 2-thread CPU device: parameters, not measurements.

    A batch of one item is `speedup` times faster than on the CPU device; a larger batch adds
    only the variable part of that time per item, so a batch of n items of the reference size
    takes `fixed_share + (1 - fixed_share) * n` times one (a GPU is underused by one item).
    """

    det_speedup: float = 30.0
    """One A4 page at 150 dpi (1248x1760 detector input) alone."""
    rec_speedup: float = 10.0
    """One chunk of 6 crops padded to 1000 px alone."""
    det_fixed_share: float = 0.5
    rec_fixed_share: float = 0.8
    copy_bytes_per_s: float = 10e9
    """Pinned host <-> device copies."""


DET_REFERENCE = (1, 1248 * 1760)
"""(rows, cost) of the detection batch `det_speedup` is quoted for."""
REC_REFERENCE = (6, 6 * 1000)
"""(rows, cost) of the recognition batch `rec_speedup` is quoted for."""


def gpu_latency(
    cpu: Latency, reference: tuple[int, int], speedup: float, fixed_share: float
) -> Latency:
    """A GPU's batch time from the CPU device's, linear in cost past the reference batch."""
    rows, cost = reference
    single = cpu.seconds(cost, rows) / speedup
    return Latency(fixed_s=fixed_share * single, per_unit_s=(1 - fixed_share) * single / cost)


DET_BYTES_PER_UNIT = 7
"""uint8 detector input (3 bytes a pixel, normalised on the GPU) and float32 map back (4)."""
REC_BYTES_PER_UNIT = 3 * 48
"""uint8 crops of height 48: per unit of padded width x rows."""


def cpu_device(
    name: str = "cpu", *, threads: int = 2, workers: WorkersConfig | None = None
) -> DeviceModel:
    """The CPU device worker with the server's default batch caps (`workers.cpu`)."""
    kind = (workers or WorkersConfig()).cpu
    return DeviceModel(
        name=name,
        kind="cpu",
        stages=("det", "rec"),
        limits=_limits(kind),
        latency={"det": CPU_DET, "rec": CPU_REC},
        transfer={"det": CPU_DET_TRANSFER, "rec": CPU_TRANSFER},
        inflight_batches=kind.inflight_batches,
        threads=threads,
        jitter=0.1,
    )


def gpu_device(
    index: int,
    assumptions: GpuAssumptions | None = None,
    *,
    workers: WorkersConfig | None = None,
    inflight_batches: int | None = None,
) -> DeviceModel:
    """GPU `index` with the server's default batch caps (`workers.gpu`) and assumed latencies."""
    gpu = assumptions or GpuAssumptions()
    kind = (workers or WorkersConfig()).gpu
    per_byte = 1.0 / gpu.copy_bytes_per_s
    return DeviceModel(
        name=f"gpu:{index}",
        kind="gpu",
        stages=("det", "rec"),
        limits=_limits(kind),
        latency={
            "det": gpu_latency(CPU_DET, DET_REFERENCE, gpu.det_speedup, gpu.det_fixed_share),
            "rec": gpu_latency(CPU_REC, REC_REFERENCE, gpu.rec_speedup, gpu.rec_fixed_share),
        },
        transfer={
            "det": Latency(fixed_s=0.0003, per_unit_s=DET_BYTES_PER_UNIT * per_byte),
            "rec": Latency(fixed_s=0.0003, per_unit_s=REC_BYTES_PER_UNIT * per_byte),
        },
        inflight_batches=kind.inflight_batches if inflight_batches is None else inflight_batches,
        jitter=0.05,
    )


def cpu_workers(workers: int, *, priority: bool = True) -> CpuModel:
    """`workers` CPU worker processes with the measured step times."""
    return CpuModel(
        workers=workers,
        # Reading a page size from the headers: not measured, assumed small.
        sizes=CpuStep(fixed_s=0.002),
        # Decode, det resize, the page and its uint8 pixels into shared memory: 55 ms for
        # 2.2 Mpx (`loadtest.bench.cpu_cost`).
        prepare=CpuStep(fixed_s=0.005, per_mpx_s=0.023),
        # Map and page read in place, DB postprocess and crops, rec resize, uint8 chunks into
        # shared memory: 49 ms for 2.2 Mpx and 29 lines.
        after_det=CpuStep(fixed_s=0.005, per_mpx_s=0.006, per_line_s=0.0011),
        # CTC decode, word boxes and assembly: 20 ms for 29 lines.
        finish=CpuStep(fixed_s=0.001, per_line_s=0.00066),
        priority=priority,
    )


def _limits(kind: DeviceClassConfig) -> dict[str, StageLimits]:
    return {stage: kind.limits(stage) for stage in ("det", "rec", "cls")}
