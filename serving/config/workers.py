"""`[workers]`: the CPU workers, the device workers, their batches and queues."""

from __future__ import annotations

from dataclasses import dataclass, field

from serving.config.checks import check

STAGES = ("ori", "det", "cls", "rec")


@dataclass(frozen=True, slots=True, kw_only=True)
class StageLimits:
    """How large a batch one device instance takes for one stage."""

    max_batch_size: int
    """Pages for det, crops for rec and cls."""
    max_cost: int
    """Pixels (H x W summed) for det; padded width x crops for rec and cls."""

    def check(self, path: str) -> None:
        """Validate, naming the TOML path in errors."""
        check(self.max_batch_size > 0, f"{path}.max_batch_size", "must be > 0")
        check(self.max_cost > 0, f"{path}.max_cost", "must be > 0")


def _cpu_det() -> StageLimits:
    return StageLimits(max_batch_size=1, max_cost=16_000_000)


def _cpu_rec() -> StageLimits:
    return StageLimits(max_batch_size=24, max_cost=24 * 1280)


def _cpu_ori() -> StageLimits:
    return StageLimits(max_batch_size=8, max_cost=8 * 224)


def _gpu_ori() -> StageLimits:
    return StageLimits(max_batch_size=32, max_cost=32 * 224)


def _gpu_det() -> StageLimits:
    return StageLimits(max_batch_size=8, max_cost=32_000_000)


def _gpu_rec() -> StageLimits:
    return StageLimits(max_batch_size=96, max_cost=96 * 1600)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceClassConfig:
    """Per-kind device settings: which stages it serves and the batches it pulls."""

    stages: tuple[str, ...] = STAGES
    det: StageLimits = field(default_factory=_cpu_det)
    rec: StageLimits = field(default_factory=_cpu_rec)
    cls: StageLimits = field(default_factory=_cpu_rec)
    ori: StageLimits = field(default_factory=_cpu_ori)
    """Pages of the page-orientation classifier (224 x 224 each): rows; rows x 224."""
    inflight_batches: int = 1
    """Batches a worker of this kind holds at once: 2 on GPUs, so that the next batch's transfer
    overlaps the current one's compute; placement counts them all."""
    queued_batches: int = 0
    """Batches sent to a worker of this kind beyond those it runs, waiting in its pipe: 1 on
    GPUs, so that when a batch ends the next is already there (the stream does not wait for the
    main process to take the answer and send another; issue 40). 0 on the CPU, whose worker runs
    one batch at a time and gains nothing from holding one more back from other workers."""

    def check(self, path: str) -> None:
        """Validate, naming the TOML path in errors."""
        check(self.inflight_batches > 0, f"{path}.inflight_batches", "must be > 0")
        check(self.queued_batches >= 0, f"{path}.queued_batches", "must be >= 0")
        for stage in self.stages:
            check(stage in STAGES, f"{path}.stages", f"unknown stage {stage!r}")
        for stage in STAGES:
            self.limits(stage).check(f"{path}.{stage}")

    def limits(self, stage: str) -> StageLimits:
        """The batch limits for one stage."""
        limits: StageLimits = getattr(self, stage)
        return limits


def _gpu_class() -> DeviceClassConfig:
    return DeviceClassConfig(
        det=_gpu_det(),
        rec=_gpu_rec(),
        cls=_gpu_rec(),
        ori=_gpu_ori(),
        inflight_batches=2,
        queued_batches=1,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueConfig:
    """One stage's batching queue."""

    max_wait_ms: float = 0.0
    """How long the oldest item may wait for company; 0 batches only what is already queued.

    The wait costs nothing while the worker has other ready work (it runs that meanwhile), and is
    skipped when no other page is in flight."""
    max_queue_len: int = 4096
    """Items; beyond this, new requests are shed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkersConfig:
    """Processes: CPU workers and device workers."""

    cpu_workers: int = 0
    """CPU worker processes for decode and pre/post-processing; 0 = the CPUs this process may
    use (its affinity, at most its cgroup's quota: `serving.cpus`), not the host's cores."""
    devices: tuple[str, ...] = ("auto",)
    """"auto" = every visible GPU, else the CPU; or a list such as ["gpu:0", "gpu:1", "cpu"]."""
    gpu_instances: int = 1
    """Device worker processes per GPU; they share it (one batch computing at a time) and each
    holds its own CUDA context and models (~0.5-1 GiB). One, as simulated with assumed GPU costs
    (docs/simulator.md): since the torch detector answers a byte map, one process's thread no
    longer bounds a GPU, and a second adds 8% pages/s at fp32 eager (GPU-bound) and none at fp16
    compiled (bound by 14 CPU workers on 16 cores). Two pays where one process's thread leaves
    the GPU idle and the CPU workers can feed more (+41% at fp16 compiled, 28 CPU workers)."""
    cpu_instances: int = 2
    """Device worker processes for "cpu"; the cores are split between them (`cpu_threads`).
    Two by default: two pages in flight keep the cores busy through the parts of a page that
    one engine runs on one core (README, CPU tuning: 1.28x the pages per second of one, at equal
    single-request latency, for about 1 GiB more)."""
    cpu: DeviceClassConfig = field(default_factory=DeviceClassConfig)
    gpu: DeviceClassConfig = field(default_factory=_gpu_class)
    det_queue: QueueConfig = field(default_factory=QueueConfig)
    rec_queue: QueueConfig = field(default_factory=lambda: QueueConfig(max_wait_ms=20.0))
    cls_queue: QueueConfig = field(default_factory=lambda: QueueConfig(max_wait_ms=20.0))
    ori_queue: QueueConfig = field(default_factory=QueueConfig)
    restart_backoff_s: float = 1.0
    cpu_task_cpu_s: float = 600.0
    """CPU seconds one CPU worker call (a document's decode, a page's steps) may use before the
    worker is killed (`RLIMIT_CPU`); 0 = no limit."""
    cpu_max_open_files: int = 256
    """Open files of one CPU worker (`RLIMIT_NOFILE`); 0 = inherited."""
    cpu_address_space_bytes: int = 0
    """Address space a CPU worker may add to its size once started (`RLIMIT_AS`; past it an
    allocation fails with `MemoryError` in that call); 0 = the memory budget, at least 2 GiB."""
    quarantine_document_deaths: int = 3
    """CPU workers the pages of one document may kill (crashed, or killed for running past their
    caller's deadline), all its pages together, before every page of it is refused with 422
    `page_quarantined` without a worker (`serving.workers.quarantine`; a page alone: 2). Before,
    a 1000-page job whose pages all crashed cost two deaths a page."""

    def __post_init__(self) -> None:
        check(self.cpu_workers >= 0, "workers.cpu_workers", "must be >= 0")
        check(self.cpu_task_cpu_s >= 0, "workers.cpu_task_cpu_s", "must be >= 0")
        check(self.cpu_max_open_files >= 0, "workers.cpu_max_open_files", "must be >= 0")
        check(self.cpu_address_space_bytes >= 0, "workers.cpu_address_space_bytes", "must be >= 0")
        check(
            self.quarantine_document_deaths > 0,
            "workers.quarantine_document_deaths",
            "must be > 0",
        )
        check(self.gpu_instances > 0, "workers.gpu_instances", "must be > 0")
        check(self.cpu_instances > 0, "workers.cpu_instances", "must be > 0")
        check(len(self.devices) > 0, "workers.devices", "must not be empty")
        for dev in self.devices:
            ok = dev in ("auto", "cpu") or (dev.startswith("gpu:") and dev[4:].isdigit())
            check(ok, "workers.devices", f"unknown device {dev!r}")
        self.cpu.check("workers.cpu")
        self.gpu.check("workers.gpu")

    def queue(self, stage: str) -> QueueConfig:
        """The queue settings of one stage."""
        queue: QueueConfig = getattr(self, f"{stage}_queue")
        return queue
