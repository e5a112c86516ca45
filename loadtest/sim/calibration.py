"""Default latency models: the CPU figures measured on this machine, the GPU ones assumed.

CPU device (Paddle 3.2.2 with oneDNN, 2 math threads), from the README's Performance section,
table "Why Paddle 3.2.2" (`loadtest/bench/engine_variants.py` at 319bedf, median ms, 2026-12-03,
idle machine):

- det 1x3x736x736: 118 ms; 1x3x960x1248: 265 ms; 1x3x1216x1568: 650 ms. Fitted through the
  smallest and the largest as `a * px + b * px**2` (a = 1.690e-7 s/px, b = 9.016e-14 s/px²): a
  1248x1760 page (A4 at 150 dpi) takes 0.81 s; the middle point comes out at 332 ms (25% over).
- rec 6x3x48x320: 104 ms; 6x3x48x960: 398 ms. Fitted per row as `c1 * w + c2 * w**2`
  (c1 = 4.670e-5 s/px, c2 = 2.333e-8 s/px²): 6x48x1800 gives 0.96 s, where the README says "a
  chunk of 6 crops at width ~1800 takes ~1 s".
- The in-process engine limit of the bench's 8 pages: median page 4.50 s, 0.208-0.237 pages/s
  (`loadtest/engine_limit.py`, README table); `BENCH_PAGES` below, run through these models,
  gives its own figure to compare (`python -m loadtest.sim --config cpu`).

CPU workers (single-threaded calls), measured on 2026-12-05 with `ocr-bench host-cost
--pages 4` (CPU time of the calling thread, on a shared 2-core machine; bench pages at 150 dpi,
2.2 Mpx, 29 lines): since issue 31 pixels cross shared memory as uint8 (22.6 MB a page, from
62.7 MB as float32), the detection map comes back as float16, and the CPU worker reads the page,
map and crops in place. Per page: prepare (decode, det resize, page and pixels into shared
memory) 55 ms (77 ms before), after_det (DB postprocess, crops, rec resize) 49 ms (73 ms), finish
(CTC decode, word boxes, assembly) 20 ms. The device worker's host side of a detection batch
(collate, normalise, the map out as float16): 30 ms a page (19 ms before, when the CPU workers
normalised).

GPU: no GPU was measured here. Every GPU figure is an assumption (`GpuProfile`), from issue 40's
estimate for one H100 and the torch engine (a CUDA engineer's reading of the code and models,
not a measurement), in three resources that can each bound a GPU:
- the GPU itself: 35-65 pages/s with fp32 eager defaults (the detector at 1280x1792 ~12.9 GMAC in
  ~310 kernels, the recogniser dominated by unfused elementwise kernels);
- the device worker's one Python thread: 50-80 pages/s (det map post-work ~15 ms a page, the
  shared-memory put 2-3 ms, eager launch 4-5 ms a batch): `WorkerThread`. Since then the torch
  detector answers a uint8 byte map, quantised on the device, and the thread only puts it into
  shared memory: measured on this CPU, 2.8 ms a 2.1 Mpx page where the float map took 18.0
  (`BYTE_MAP_PUT_S`); launch and the rec finish are still the issue's (assumed);
- 16 cores of CPU-worker steps: 150-250 pages/s (the simulator keeps the costs measured here,
  `cpu_workers`, which are slower: about 8 pages/s a worker).
Published anchor: TurboOCR (TensorRT fp16, PP-OCRv5 mobile, C++) 268 pages/s on one RTX 5090.
`GPU_PROFILES` names the parameter sets (`--gpu-profile`).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadtest.sim.model import CpuModel, CpuStep, DeviceModel, Latency, WorkerThread
from serving.config import DeviceClassConfig, StageLimits, WorkersConfig

CPU_DET = Latency(per_unit_s=1.690e-7, per_unit_sq_s=9.016e-14)
"""2-thread CPU device, detection: README 118 ms at 736x736 and 650 ms at 1216x1568."""
CPU_REC = Latency(per_unit_s=4.670e-5, per_unit_sq_s=2.333e-8)
"""2-thread CPU device, recognition: README 104 ms at 6x48x320 and 398 ms at 6x48x960."""
CPU_TRANSFER = Latency(fixed_s=0.0005, per_unit_s=3e-9)
"""The device worker's side of shared memory and the pipe, for a rec batch."""
CPU_DET_TRANSFER = Latency(fixed_s=0.0005, per_unit_s=1.2e-8)
"""The device worker's side of a det batch: uint8 pixels collated and normalised, the map out as
float16 (30 ms for a 2.2 Mpx page, `ocr-bench host-cost`)."""


DET_REFERENCE_PX = 1280 * 1792
"""The detector input issue 40's estimate is quoted for (an A4 page at 150 dpi, bucketed)."""
BYTE_MAP_PUT_S = 0.0028
"""Measured (this CPU, 2 busy cores, 2026-12-06; docs/gpus.md, "The detection map as bytes"):
the device worker's side of a det batch with the torch detector's byte map, the map copied into
shared memory, median per 150 dpi page of `BYTE_MAP_PUT_PX`
(`python -m loadtest.bench.det_map_cost --pages 3 --repeats 15` at 319bedf); 18.0 ms with the
float16 map it replaced, where issue 40 estimated 15 + 2.5."""
BYTE_MAP_PUT_PX = 2_100_000
BENCH_REC_ROW_PX = 53_240
"""Padded recognition width x rows of a bench page, bucketed (`BENCH_PAGES`, 38 lines a page on
average): what the recogniser's share of a page is spread over."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuProfile:
    """One GPU and its device worker, as assumed (issue 40's estimate, not measured).

    The GPU's batch time is `batch_s + per_unit * cost` per stage (a GPU underused by a small
    batch still runs every kernel once); the worker thread's steps are `WorkerThread`'s.
    """

    name: str
    det_page_s: float
    """GPU time of one `DET_REFERENCE_PX` page in a full batch; linear in pixels."""
    rec_page_s: float
    """GPU time of a bench page's recognition (`BENCH_REC_ROW_PX`) in full batches; linear in
    padded width x rows (no quadratic term: unlike the CPU, the GPU's time is elementwise)."""
    det_batch_s: float
    """GPU time every det batch costs, whatever its size (its kernels run once each)."""
    rec_batch_s: float
    launch_s: float
    """The worker thread's start of a batch: its inputs staged and its kernels launched."""
    det_post_s: float
    """The worker thread's post-work of a `DET_REFERENCE_PX` page's map; linear in pixels (0
    with the byte map: quantised on the device, a few elementwise kernels, not timed)."""
    det_put_s: float
    """The worker thread's put of a reference page's map into shared memory; linear in pixels."""
    rec_finish_s: float
    """The worker thread's finish of a rec batch (small arrays back inline)."""
    copy_bytes_per_s: float = 10e9
    """Pinned host <-> device copies (in parallel with the rest)."""


H100_FP32_EAGER = GpuProfile(
    name="h100-fp32-eager",
    # Issue 40: the GPU 35-65 pages/s, fp32 eager; 20 ms a bench page (50 pages/s), split 30/70
    # between det and rec (ours: the issue says the recogniser dominates).
    det_page_s=0.006,
    rec_page_s=0.014,
    # Ours: ~310 kernels a model, a few microseconds each however small the batch.
    det_batch_s=0.001,
    rec_batch_s=0.001,
    # Issue 40: eager launch 4-5 ms a batch.
    launch_s=0.0045,
    # Measured on the CPU: the byte map's put (`BYTE_MAP_PUT_S`), linear in pixels (3.1 ms a
    # reference page); issue 40's map post-work (~15 ms) and put (2-3 ms) were the float map's.
    det_post_s=0.0,
    det_put_s=BYTE_MAP_PUT_S * DET_REFERENCE_PX / BYTE_MAP_PUT_PX,
    rec_finish_s=0.0005,  # ours: not in the issue
)
"""Issue 40's estimate for the server's defaults when it was made (fp32, eager)."""

H100_FP16_COMPILED = GpuProfile(
    name="h100-fp16-compiled",
    # Ours: fp16 on tensor cores and Inductor's fused elementwise kernels, 3x fp32 eager (about
    # 150 pages/s: below TurboOCR's 268 with TensorRT on an RTX 5090).
    det_page_s=0.002,
    rec_page_s=0.014 / 3,
    det_batch_s=0.0003,
    rec_batch_s=0.0003,
    # Ours: fused kernels launched from Inductor's wrapper, about a third of eager's launches.
    launch_s=0.0015,
    # Host work, as fp32 eager: compiling the models does not change it.
    det_post_s=0.0,
    det_put_s=BYTE_MAP_PUT_S * DET_REFERENCE_PX / BYTE_MAP_PUT_PX,
    rec_finish_s=0.0005,
)
"""fp16 (`engine.precision`) and compiled (`[engine.torch] compile`): assumed, see the comments."""

GPU_PROFILES = {profile.name: profile for profile in (H100_FP32_EAGER, H100_FP16_COMPILED)}


def gpu_latency(profile: GpuProfile) -> dict[str, Latency]:
    """The GPU's compute time of a batch, per stage."""
    return {
        "det": Latency(
            fixed_s=profile.det_batch_s, per_unit_s=profile.det_page_s / DET_REFERENCE_PX
        ),
        "rec": Latency(
            fixed_s=profile.rec_batch_s, per_unit_s=profile.rec_page_s / BENCH_REC_ROW_PX
        ),
    }


def gpu_thread(profile: GpuProfile) -> WorkerThread:
    """The GPU worker's thread: launch per batch; det map post-work and put per pixel."""
    launch = Latency(fixed_s=profile.launch_s)
    det_finish = (profile.det_post_s + profile.det_put_s) / DET_REFERENCE_PX
    return WorkerThread(
        start={"det": launch, "rec": launch},
        finish={
            "det": Latency(per_unit_s=det_finish),
            "rec": Latency(fixed_s=profile.rec_finish_s),
        },
    )


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


def gpu_devices(
    index: int,
    profile: GpuProfile = H100_FP32_EAGER,
    *,
    workers: WorkersConfig | None = None,
    instances: int | None = None,
    inflight_batches: int | None = None,
    queued_batches: int | None = None,
) -> list[DeviceModel]:
    """GPU `index`'s device workers (`workers.gpu_instances`, or `instances`), named as the
    server names them (`serving.service.devices.device_specs`)."""
    count = (workers or WorkersConfig()).gpu_instances if instances is None else instances
    return [
        gpu_device(
            index,
            profile,
            workers=workers,
            instance=None if count == 1 else i,
            inflight_batches=inflight_batches,
            queued_batches=queued_batches,
        )
        for i in range(count)
    ]


def gpu_device(
    index: int,
    profile: GpuProfile = H100_FP32_EAGER,
    *,
    workers: WorkersConfig | None = None,
    instance: int | None = None,
    inflight_batches: int | None = None,
    queued_batches: int | None = None,
) -> DeviceModel:
    """One device worker of GPU `index` (its `instance`-th; None: the only one) with the server's
    defaults (`workers.gpu`) and an assumed profile."""
    kind = (workers or WorkersConfig()).gpu
    per_byte = 1.0 / profile.copy_bytes_per_s
    device = f"gpu:{index}"
    return DeviceModel(
        name=device if instance is None else f"{device}#{instance}",
        device=device,
        kind="gpu",
        stages=("det", "rec"),
        limits=_limits(kind),
        latency=gpu_latency(profile),
        transfer={
            "det": Latency(fixed_s=0.0003, per_unit_s=DET_BYTES_PER_UNIT * per_byte),
            "rec": Latency(fixed_s=0.0003, per_unit_s=REC_BYTES_PER_UNIT * per_byte),
        },
        inflight_batches=kind.inflight_batches if inflight_batches is None else inflight_batches,
        queued_batches=kind.queued_batches if queued_batches is None else queued_batches,
        thread=gpu_thread(profile),
        jitter=0.05,
    )


def cpu_workers(workers: int, *, priority: bool = True) -> CpuModel:
    """`workers` CPU worker processes with the measured step times."""
    return CpuModel(
        workers=workers,
        # Reading a page size from the headers: not measured, assumed small.
        sizes=CpuStep(fixed_s=0.002),
        # Decode, det resize, the page and its uint8 pixels into shared memory: 55 ms for
        # 2.2 Mpx (`ocr-bench host-cost`).
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
