"""Everything behind the HTTP layer, wired from the config: pools, scheduler, devices, service."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from models.base import EngineBackendError
from models.bundle import ModelBundle
from models.engine_options import device_kind
from serving.config import STAGES, AppConfig
from serving.decode.readers import DecodeLimits
from serving.engine.choice import COMPILE_KEYS, PRECISION_KEYS
from serving.engine.gpu_choice import GpuEngineChoice
from serving.errors import NotReady, ShuttingDown
from serving.jobs.credentials import CredentialStore
from serving.jobs.runner import JobRunner
from serving.jobs.staging import UploadSlots
from serving.metrics import Metrics
from serving.model_sets import ModelSets, load_sets, stage_kind
from serving.request_options import OcrOptions, request_options
from serving.scheduling.admission import Admission, admission_pages
from serving.scheduling.batch_shapes import BatchShapes, batching_mode
from serving.scheduling.batching import Scheduler
from serving.scheduling.cost_model import CostModel
from serving.scheduling.memory_budget import MemoryBudget, default_budget_bytes
from serving.scheduling.page_memory import PageCosts, engine_retain_bytes, pages_share_bytes
from serving.scheduling.placement import Placement
from serving.scheduling.quotas import ClientSlots
from serving.service.devices import (
    check_engines,
    check_set_engines,
    device_specs,
    gpu_engine,
    readable_default,
    with_backend,
    with_sets,
    without_unread_orientation,
)
from serving.service.job_pages import job_runner
from serving.service.ocr import OcrService
from serving.service.requests import EndpointServices, JobRequests, OcrRequests, Renderer
from serving.workers import shm
from serving.workers.cpu_pool import CpuPool
from serving.workers.cpu_stages import init_cpu_worker
from serving.workers.device_pool import (
    DevicePool,
    DeviceWorkerHandle,
    WorkerHandle,
    discard_payload,
)
from serving.workers.device_worker import LONE_THREADS_KEY, DeviceSpec, WorkerSetup
from serving.workers.page_pictures import PictureLimits
from serving.workers.quarantine import Quarantine
from serving.workers.sandbox import WorkerLimits, device_environ, scrubbed_environ
from serving.workers.watchdog import LoopWatchdog

logger = logging.getLogger(__name__)


@dataclass
class Runtime:
    """The server's moving parts; `start()` brings them up, `stop()` takes them down."""

    config: AppConfig
    bundle: ModelBundle
    prefix: str
    cpu: CpuPool
    scheduler: Scheduler
    devices: DevicePool
    service: OcrService
    metrics: Metrics
    started: asyncio.Event = field(default_factory=asyncio.Event)
    startup_error: str | None = None
    jobs: JobRunner | None = None
    """Batch jobs (`/v1/jobs`); None where the runtime serves no jobs (`ocr-batch`)."""
    watchdog: LoopWatchdog | None = None
    claim: shm.PrefixClaim | None = None
    """This server's hold on `prefix`; released once `stop()` has swept its segments."""
    budget_bytes: int = 0
    """The whole memory budget (`server.memory_budget_bytes` or its default): pages are charged
    against `service.budget`, its share for pages (`page_memory.pages_share_bytes`)."""
    sets: ModelSets | None = None
    """Every model set served (`serving.model_sets`); None: `bundle` alone."""
    cost_model: CostModel = field(default_factory=CostModel)
    """The devices' measured batch costs, as placement predicts with them (`/readyz`)."""
    gpu_engine: GpuEngineChoice | None = None
    """Which engine GPU device workers run, and why (`engine.gpu_backend`; `/readyz`)."""
    credentials: CredentialStore | None = None
    """The jobs' webhook secrets and S3 credentials, per key (`serving.jobs.credentials`); None
    where the runtime serves no jobs."""
    shapes: BatchShapes | None = None
    """The batch shapes every request's inputs are padded to (`[engine] batching`, for this
    server's devices: `serving.scheduling.batch_shapes`), set in its options when they are built
    (`serving.request_options`); None: exact, as PaddleOCR."""

    @classmethod
    def build(
        cls,
        config: AppConfig,
        *,
        specs: list[DeviceSpec] | None = None,
        backend: str | None = None,
        jobs: bool = True,
    ) -> Runtime:
        """Read the models and build every part (no process is started).

        Args:
            config: the configuration.
            specs: the device workers; default: `device_specs(config)`.
            backend: replaces every device worker's configured engine backend, as a registered
                name or "module:attribute" naming an `EngineBackend` (tests serve with fakes).
            jobs: whether to serve batch jobs.

        Raises:
            EngineBackendError: `backend` names no engine backend.
            ConfigError: a file of the jobs' credentials does not read or is invalid.
        """
        credentials = CredentialStore.load(config) if jobs else None
        models = config.models
        sets = load_sets(models)
        gpu = gpu_engine(config)
        logger.info(
            "GPU engine: %s (engine.gpu_backend = %r: %s)",
            gpu.backend or "none, the CPU serves",
            gpu.setting,
            gpu.reason,
        )
        specs = specs if specs is not None else device_specs(config)
        if backend is not None:
            specs = with_backend(specs, backend)
        # An engine that cannot read the default set's models serves another as the default.
        sets = readable_default(sets, specs)
        bundle = sets.default.bundle
        queues = {stage: config.workers.queue(stage) for stage in STAGES}
        queues.update(
            {stage: config.workers.queue(stage_kind(stage)) for stage in sets.extra_stages()}
        )
        budget_bytes = config.server.memory_budget_bytes or default_budget_bytes()
        budget = MemoryBudget(pages_share_bytes(budget_bytes))  # the rest: engines between pages
        cost_model = CostModel()  # what placement predicts each device's batches with
        # Waiting for a batch to fill only helps while other pages are in flight.
        scheduler = Scheduler(
            queues,
            on_drop=discard_payload,
            company_possible=lambda: admission.inflight > 1,
            background_share=config.jobs.min_share,
            placement=Placement(model=cost_model),
        )
        gpus = len({s.device for s in specs if device_kind(s.device) == "gpu"})
        max_pages, why = admission_pages(
            config.server.max_inflight_pages, config.server.inflight_pages_per_gpu, gpus
        )
        admission = Admission(max_pages=max_pages, max_pages_why=why)
        bundle, specs = without_unread_orientation(bundle, specs)
        check_engines(bundle, specs)
        for model_set in sets.extra:  # a set no device's engine reads is left out, not fatal
            try:
                check_set_engines(model_set, specs)
            except EngineBackendError as err:
                sets = sets.without(model_set.name, str(err))
        queues_for_sets = sets.extra_stages()
        specs = with_sets(specs, queues_for_sets)
        claim = shm.claim_prefix()  # before any segment is named with it
        prefix = claim.prefix
        setup = WorkerSetup(
            model_dirs=sets.model_dirs(),
            shm_prefix=prefix,
            log_level=config.server.log_level,
            log_format=config.server.log_format,
            engine_retain_bytes=engine_retain_bytes(
                budget_bytes, sum("det" in spec.stages for spec in specs)
            ),
            det_thresh=config.pipeline.det.thresh,
            check_pairs=sets.pairs(),
            inspectable=config.server.inspectable,
        )
        metrics = Metrics()
        devices = DevicePool(
            _device_workers(config, specs, setup),
            scheduler,
            metrics=metrics,
            restart_backoff_s=config.workers.restart_backoff_s,
        )
        cpu = CpuPool(
            config.cpu_workers,
            initializer=init_cpu_worker,
            initargs=(str(bundle.rec.directory), prefix, sets.rec_dirs()),
            on_restart=metrics.worker_restarts.labels(kind="cpu").inc,
            background_share=config.jobs.min_share,
            limits=WorkerLimits(
                address_space_headroom_bytes=(
                    config.workers.cpu_address_space_bytes or max(budget_bytes, 2 << 30)
                ),
                open_files=config.workers.cpu_max_open_files,
                task_cpu_s=config.workers.cpu_task_cpu_s,
                inspectable=config.server.inspectable,
            ),
            # No keys, no database URL: they decode untrusted files (`serving.workers.sandbox`).
            environ=lambda: scrubbed_environ(os.environ),
            telemetry=config.telemetry if config.telemetry.enabled else None,
            quarantine=Quarantine(document_deaths=config.workers.quarantine_document_deaths),
        )
        _track(metrics, admission, budget, scheduler, cpu, devices)
        for stage in queues_for_sets:
            metrics.track_queue_depth(stage, functools.partial(scheduler.policy.depth, stage))
        batching = batching_mode(config.engine.batching, (device_kind(s.device) for s in specs))
        shapes = BatchShapes.of(batching, config.engine.torch)
        service = OcrService(
            cpu=cpu,
            scheduler=scheduler,
            limits=_decode_limits(config),
            admission=admission,
            budget=budget,
            prefix=prefix,
            page_costs=lambda: PageCosts.measured(w.info for w in devices.workers),
            pictures=PictureLimits(
                max_pixels=config.paddlex.visualize_max_pixels,
                max_bytes=config.paddlex.visualize_max_bytes,
            ),
        )
        return cls(
            config=config,
            bundle=bundle,
            sets=sets,
            prefix=prefix,
            cpu=cpu,
            scheduler=scheduler,
            devices=devices,
            service=service,
            metrics=metrics,
            jobs=job_runner(
                config,
                service,
                bundle,
                metrics,
                credentials=credentials,
                sets=sets,
                shapes=shapes,
            )
            if credentials is not None
            else None,
            credentials=credentials,
            shapes=shapes,
            claim=claim,
            budget_bytes=budget_bytes,
            cost_model=cost_model,
            gpu_engine=gpu,
        )

    @property
    def ready(self) -> bool:
        """Models loaded, warm-up pages run, every device worker alive."""
        return self.started.is_set() and self.devices.ready and self.cpu.ready

    def check_ready(self) -> None:
        """Raise NotReady (503) until start-up has finished.

        A worker restarting later does not refuse requests: they wait in the queues for it (within
        their deadline), while `/readyz` answers 503 so a load balancer prefers other replicas.
        """
        if not self.started.is_set():
            # Why it failed is in the log and in `/readyz` for loopback callers, never in an
            # answer any client gets (it names paths, devices and libraries).
            raise NotReady("Start-up failed; see the server's log" if self.startup_error else None)

    def endpoint_services(self) -> EndpointServices:
        """The narrow services the HTTP endpoints are given (`serving.service.requests`)."""
        ocr = OcrRequests(
            check_ready=self.check_ready,
            bundle=self.bundle,
            sets=self.sets,
            pipeline=self.config.pipeline,
            shapes=self.shapes,
            service=self.service,
            pages=self.metrics.pages,
        )
        return EndpointServices(
            config=self.config,
            metrics=self.metrics,
            budget=self.service.budget,
            readiness=self,
            ocr=ocr,
            renderer=Renderer(self.cpu, self.service.budget),
            jobs=JobRequests(
                runner=self.jobs,
                config=self.config.jobs,
                cpu=self.cpu,
                limits=self.service.limits,
                budget=self.service.budget,
                uploads=UploadSlots(self.config.jobs.max_uploads_per_key),
                credentials=self.credentials,
                streams=ClientSlots(
                    self.config.auth.max_open_streams,
                    setting="auth.max_open_streams",
                    what="results streams",
                ),
            ),
        )

    def request_options(self, overrides: Mapping[str, Any], *, no_classifier: str) -> OcrOptions:
        """A request's options over the served models and the config's pipeline defaults.

        Raises:
            ValidationFailed: the request asks for the classifier and none is configured (the
                API's `no_classifier` message), or an override is out of range.
        """
        return request_options(
            self.bundle,
            self.config.pipeline,
            overrides,
            no_classifier=no_classifier,
            sets=self.sets,
            shapes=self.shapes,
        )

    def describe(self) -> dict[str, Any]:
        """Readiness and the state of every part, as `/readyz` reports it to loopback callers
        (pids and the start-up error included); others get `{"ready": ...}` only."""
        body: dict[str, Any] = {
            "ready": self.ready,
            "devices": {
                w.spec.name: {
                    "ready": w.ready,
                    "pid": w.pid,
                    "restarts": w.restarts,
                    **{
                        k: w.info[k]
                        for k in (*PRECISION_KEYS, *COMPILE_KEYS, LONE_THREADS_KEY)
                        if k in w.info
                    },
                }
                for w in self.devices.workers
            },
            "cpu_workers": {"pids": self.cpu.pids(), "restarts": self.cpu.restarts},
            "admission": self.service.admission.describe(),
            "memory_budget": self.service.budget.describe(),
            "page_costs": {
                "budget_bytes": self.budget_bytes,
                **self.service.page_costs().describe(),
            },
            "cost_model": self.cost_model.describe(),
            "batching": "exact" if self.shapes is None else "bucketed",
            **({"gpu_engine": self.gpu_engine.describe()} if self.gpu_engine else {}),
            "model_sets": self.describe_models(),
        }
        if self.startup_error:
            body["error"] = self.startup_error
        return body

    def describe_models(self) -> dict[str, Any]:
        """The model sets served, each with its languages, the languages it answers (`lang`
        picks it: `ModelSets.pick`), models, stages and the device workers that run them (engine,
        precision, ready), and the sets left out with why:
        `GET /v1/models`, and `/readyz` for loopback callers."""
        sets = self.sets or ModelSets.single(
            self.bundle, self.config.models.name or self.bundle.rec.model_name.removesuffix("_rec")
        )
        answering = sets.answering()
        served = []
        for model_set in sets.all:
            stages = {model_set.stage(kind) for kind in model_set.bundle.specs}
            devices = [
                {
                    "worker": w.spec.name,
                    "device": w.spec.device,
                    "engine": w.spec.engine.backend,
                    "ready": w.ready,
                    **{k: w.info[k] for k in PRECISION_KEYS[:2] if k in w.info},
                }
                for w in self.devices.workers
                if stages & set(w.spec.stages)
            ]
            entry = {**model_set.describe(), "default": model_set is sets.default}
            entry["answers"] = sorted(k for k, name in answering.items() if name == model_set.name)
            served.append({**entry, "devices": devices})
        return {
            "default": sets.default.name,
            "models": served,
            "languages": sets.languages,
            "unavailable": [{"name": n, "reason": r} for n, r in sets.unavailable.items()],
        }

    def abort_inflight(self) -> int:
        """Shutdown is running out of grace: fail all work in flight with 503 shutting_down,
        wherever it waits (inference queues and devices, CPU stages, the memory budget), so that
        every request answers in its API's format. Returns how many pieces of work failed."""
        error = ShuttingDown()
        return self.scheduler.close() + self.cpu.abort(error) + self.service.budget.abort(error)

    async def start(self) -> None:
        """Start the CPU pool and the device workers; readiness follows. A failure is logged
        and shown by `/readyz` (`startup_error`): this runs as a background task, whose
        exception nobody else would see."""
        try:
            try:
                shm.sweep_orphans()  # segments of servers killed before they could sweep
            except OSError as err:  # leftovers cost memory, not correctness: start anyway
                logger.warning("could not sweep shared memory left by dead servers: %s", err)
            if self.config.server.watchdog_s > 0:
                loop = asyncio.get_running_loop()
                self.watchdog = LoopWatchdog(loop, self.config.server.watchdog_s)
                self.watchdog.start()
            # OpenCV reads its own pixel cap (2^30 by default) once, as a process imports it:
            # the CPU workers, spawned from here on, inherit this one. Images are sized from
            # their headers first (`serving.decode.readers`); this holds should a header and
            # its pixels disagree.
            os.environ["OPENCV_IO_MAX_IMAGE_PIXELS"] = str(self.config.input.max_image_pixels)
            self.cpu.start()
            await asyncio.gather(self.cpu.warm_up(), self.devices.start())
        except Exception as err:
            self.startup_error = f"Start-up failed: {err}"
            logger.exception("start-up failed")
            raise
        self.started.set()
        if self.jobs is not None:
            await self.jobs.start()
        logger.info(
            "ready: %d CPU workers, device workers %s",
            self.cpu.workers,
            ", ".join(f"{w.spec.name} (pid {w.pid})" for w in self.devices.workers),
        )

    async def stop(self) -> None:
        """Stop every process and remove any shared-memory segment left."""
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.jobs is not None:
            await self.jobs.stop()
        self.scheduler.close()  # work still awaited, or submitted later, fails with 503
        for item in self.scheduler.drain():
            discard_payload(item)
            if not item.future.done():
                item.future.cancel()
        await self.devices.stop()
        await self.cpu.stop()
        swept = shm.sweep(self.prefix)
        if swept:
            logger.info("removed %d shared-memory segments left by workers", swept)
        if self.claim is not None:
            self.claim.release()
        logger.info("stopped (pid %d)", os.getpid())


def _device_workers(
    config: AppConfig, specs: list[DeviceSpec], setup: WorkerSetup
) -> list[DeviceWorkerHandle]:
    """A handle per device worker, with the batch limits of its device's kind."""
    workers = []
    for spec in specs:
        kind = config.workers.gpu if spec.device.startswith("gpu:") else config.workers.cpu
        limits = {stage: kind.limits(stage_kind(stage)) for stage in (*STAGES, *spec.stages)}
        workers.append(
            DeviceWorkerHandle(
                spec=spec,
                limits=limits,
                setup=setup,
                # No keys, no database URL: a hijacked CPU worker finds none here either.
                environ=lambda: device_environ(os.environ),
            )
        )
    return workers


def _decode_limits(config: AppConfig) -> DecodeLimits:
    """The `[input]` limits every page is decoded under."""
    return DecodeLimits(
        max_pdf_pages=config.input.max_pdf_pages,
        pdf_render_scale=config.input.pdf_render_scale,
        max_image_pixels=config.input.max_image_pixels,
        max_frames_per_document=config.input.max_frames_per_document,
        max_page_side_px=config.input.max_page_side_px,
    )


def _track(
    metrics: Metrics,
    admission: Admission,
    budget: MemoryBudget,
    scheduler: Scheduler,
    cpu: CpuPool,
    devices: DevicePool,
) -> None:
    """The gauges read from the parts when `/metrics` is scraped: admission and the memory
    budget, each stage's queue, batch jobs' share of the devices and the CPU workers, and each
    process's memory."""
    metrics.track_admission(
        lambda: admission.inflight, lambda: admission.page_s or 0.0, budget.gauge
    )
    for stage in STAGES:
        metrics.track_queue_depth(stage, functools.partial(scheduler.policy.depth, stage))
    metrics.track_background_share("devices", scheduler.background_share)
    metrics.track_background_share("cpu_workers", cpu.background_share)
    metrics.track_memory(
        {
            "main": lambda: [os.getpid()],
            "cpu_workers": cpu.pids,
            **{w.spec.name: functools.partial(_pids, w) for w in devices.workers},
        }
    )


def _pids(worker: WorkerHandle) -> list[int]:
    return [worker.pid] if worker.pid is not None else []
