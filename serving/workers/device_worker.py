"""A device worker process: owns the det/cls/rec predictors of one device and runs batches.

It only executes what the main process hands it (policy lives in `serving.scheduling`).
Inputs arrive as shared-memory references to uint8 pixels (`pipelines.pixels`), which the worker
collates and normalises to the model's float32 input right before inference; detection maps leave
the same way (float16, or as the torch engine quantised them to bytes on its device:
`pipelines.det_byte_map`), while recognition and classification results, already reduced to small
arrays, travel inline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import signal
import time
import warnings
from collections import deque
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, cast

import numpy as np

from models.base import AloneRunner
from models.device_faults import is_device_fault
from models.embedded import resolve_model_dir
from models.engine_options import device_kind
from models.openvino_backend import OpenVinoPredictor
from models.precision_verdict import ModelCheck
from models.registry import EngineChoice
from models.spec import ModelSpec, load_model_spec
from models.staging import PixelInput, Slot, StagedPredictor
from models.torch_precision import PrecisionPlan, fall_back
from pipelines.pixels import normalize, row_sizes
from pipelines.stages import ModelStage, Stage
from serving.engine.choice import (
    PRECISION_CHECKS_KEY,
    compile_report,
    model_stages,
    precision_report,
    use_byte_maps,
)
from serving.engine.warmup import (
    WarmupMismatch,
    check_warmup_texts,
    measure_det_bytes_per_px,
    release_engine_memory,
    warm_up_page,
)
from serving.errors import OcrError, PredictorFailed
from serving.log_config import configure_logging
from serving.model_sets import StagePair, stage_kind
from serving.proc import die_with_parent, release_free_heap
from serving.scheduling.page_memory import DEFAULT_ENGINE_BYTES_PER_DET_PX, ENGINE_BYTES_KEY
from serving.workers import shm
from serving.workers.completions import Completions
from serving.workers.sandbox import forbid_inspection

logger = logging.getLogger(__name__)

LONE_THREADS_KEY = "lone_threads"
"""Where a device worker's ready report says on how many threads it runs a batch alone (0: it
does not), which the dispatcher reads and `/readyz` shows."""

DEVICE_FAULT_EXIT_CODE = 86
"""The exit status of a worker whose device failed for good (`models.device_faults`): the pool
restarts it like any worker that died, with a fresh CUDA context."""


class DeviceFault(RuntimeError):
    """A sticky device error: no batch can run in this process any more."""


def _raise_if_fault(err: Exception, stage: str) -> None:
    if is_device_fault(err):
        raise DeviceFault(f"{stage} batch hit a device fault: {err}") from err


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSpec:
    """One device worker: which device, which stages, which engine."""

    name: str
    """Unique worker name, e.g. "cpu" or "gpu:0#1" (second instance on GPU 0)."""
    device: str
    """"cpu" or "gpu:N"."""
    stages: tuple[str, ...]
    max_rows: dict[str, int] = field(default_factory=dict)
    """Largest batch (rows) this worker pulls per stage; sizes GPU TensorRT profiles."""
    engine: EngineChoice
    """Backend and options, built for this worker's own device (`serving.engine.choice`)."""
    queued_batches: int = 0
    """Batches the main process sends beyond the `inflight_batches` the worker runs: they wait
    in the pipe until a running one ends (`workers.<kind>.queued_batches`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSetup:
    """What every device worker needs to load its models."""

    model_dirs: dict[str, str]
    """Stage -> model directory, for the stages that have a model."""
    shm_prefix: str
    log_level: str = "info"
    log_format: str = "text"
    """"text" or "json", as `server.log_format`."""
    engine_retain_bytes: int = 768 << 20
    """Working memory the detector's engine may keep between pages: after a batch whose input
    needs more (its pixels times the measured bytes per pixel), the engine is asked to release it
    (`serving.scheduling.page_memory.engine_retain_bytes`: a share of the memory budget)."""
    check_pairs: tuple[StagePair, ...] = ()
    """Each model set's detector and recogniser stages and languages, which the precision check
    reads together (`ModelSets.pairs`); none: the default pair, "det" and "rec"."""
    det_thresh: float | None = None
    """`[pipeline.det] thresh`: a detector whose engine quantises its map on the device answers
    byte maps exact at it (`serving.engine.choice.use_byte_maps`); None: float maps."""
    inspectable: bool = False
    """`server.inspectable`: else the process turns `PR_SET_DUMPABLE` off first thing."""


@dataclass(frozen=True, slots=True)
class ItemOk:
    """A successful item: a ShmRef (det) or small arrays (rec, cls)."""

    value: Any


@dataclass(frozen=True, slots=True)
class ItemFailed:
    """A failed item; other items of the batch are unaffected."""

    error: OcrError


@dataclass(slots=True)
class DeviceWorkerChild:
    """Inside the device worker process: one device's predictors and the loop that runs the
    batches the main process sends (its handle there is `device_pool.DeviceWorkerHandle`)."""

    spec: DeviceSpec
    setup: WorkerSetup
    conn: Connection
    predictors: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, ModelStage[Any]] = field(default_factory=dict)
    """How each stage reads its predictor's answers (`serving.engine.choice.model_stages`)."""
    norms: dict[str, str] = field(default_factory=dict)
    """Stage -> the stage whose normalisation its pixels get, where it is not the stage's own
    (`models.spec.ModelSpec.pixel_norm`: a PaddleOCR 2.x textline classifier's, "rec")."""
    precision_checks: dict[str, ModelCheck] = field(default_factory=dict)
    """What this CPU's precision check found for each OpenVINO model, by stage (`/readyz`)."""
    release_pending: bool = False
    """A detector batch over `release_above_px` ran since the engine last freed its memory."""
    det_alone: bool | None = None
    """Whether the detector's last batch ran alone (`_predict`); None before the first."""
    cpu_mark_s: float = 0.0
    """The process's CPU time (every thread's: the engine's too) when it last answered a batch
    (`_send_oldest`, which reports what was used since, `BatchCpu`)."""
    release_above_px: int = 0
    """Detector-input pixels (a batch's, all rows) beyond which the engine is asked to free the
    working memory it keeps for that shape (`serving.engine.warmup.release_engine_memory`), which
    the memory budget charged for the page only while it was in flight: `engine_retain_bytes` over
    the bytes per pixel measured at warm-up. 0 (before warm-up): after every detector batch."""

    def load(self) -> None:
        specs = {  # the model sets' own stages too ("rec@PP-OCRv6_small": serving.model_sets)
            stage: load_model_spec(resolve_model_dir(directory), stage_kind(stage))
            for stage, directory in self.setup.model_dirs.items()
        }
        made = {
            stage: self.spec.engine.predictor(
                specs[stage], max_batch_rows=self.spec.max_rows.get(stage, 1)
            )
            for stage in self.spec.stages
            if stage in specs
        }
        self.precision_checks = self._check_precisions(made, specs)
        # Reduced outputs asked for before loading (`use` asks again): an engine that builds
        # the reduction into its compiled model (OpenVINO's argmax) then compiles it once.
        model_stages(made)
        for stage, predictor in made.items():
            predictor.load()
            if specs[stage].pixel_norm != specs[stage].kind:
                self.norms[stage] = specs[stage].pixel_norm
        self.use(made)

    def _check_precisions(
        self, made: dict[str, Any], specs: dict[str, ModelSpec]
    ) -> dict[str, ModelCheck]:
        """This CPU's precision check for the model sets this worker serves a stage of, each
        model's verdict given to its predictor before it loads (OpenVINO's "auto", "int8")."""
        if not any(isinstance(p, OpenVinoPredictor) for p in made.values()):
            return {}
        from serving.engine.precision_check import check_worker_precisions

        checks = check_worker_precisions(made, specs, self.setup.check_pairs, self.spec.engine)
        release_free_heap()  # the check's own models are closed: hand their heap back
        return checks

    def use(self, predictors: dict[str, Any]) -> None:
        """Serve with these loaded predictors, one a stage (`load` makes them from the spec)."""
        self.predictors = dict(predictors)
        if self.setup.det_thresh is not None:
            use_byte_maps(self.predictors, self.setup.det_thresh)
        self.stages = model_stages(self.predictors)

    def warm_up(self) -> dict[str, Any]:
        """Read the warm-up page with every stage and check its text (once more at fp32 where an
        "auto" half precision read it wrong: `models.torch_precision`); what the worker reports
        ready with."""
        started = time.monotonic()
        try:
            texts = self._read_warmup_page()
        except WarmupMismatch as err:
            if not self.spec.engine.options.precision_fallback:
                raise
            self._reload_at_fp32(str(err))
            texts = self._read_warmup_page()
        return {
            "warmup_s": round(time.monotonic() - started, 3),
            "warmup_texts": texts,
            LONE_THREADS_KEY: self.lone_threads(),
            **self.measure_memory(),
        }

    def _read_warmup_page(self) -> list[str]:
        texts = warm_up_page(self.predictors, self.setup.model_dirs)
        check_warmup_texts(texts, self.predictors)
        return texts

    def _reload_at_fp32(self, why: str) -> None:
        """Give up the half precision "auto" chose: its warm-up page read wrong (`why`). The
        models are loaded again at fp32 (a compiled model's graphs are per precision), and the
        spec's options say why, for the ready report."""
        options = self.spec.engine.options
        plan = fall_back(
            PrecisionPlan(options.precision, options.precision_reason, fallback=True), why
        )
        logger.warning("device worker %s: %s", self.spec.name, plan.reason)
        self.close()
        fp32 = dataclasses.replace(
            options,
            precision=plan.precision,
            precision_reason=plan.reason,
            precision_fallback=plan.fallback,
        )
        engine = dataclasses.replace(self.spec.engine, options=fp32)
        self.spec = dataclasses.replace(self.spec, engine=engine)
        self.load()

    def lone_threads(self) -> int:
        """Threads a batch sent to run alone runs on: `lone_threads` where a predictor of this
        worker can (`models.base.AloneRunner`), else 0 (the dispatcher then sends none)."""
        lone = self.spec.engine.options.lone_threads
        can = any(isinstance(p, AloneRunner) for p in self.predictors.values())
        return lone if can else 0

    def measure_memory(self) -> dict[str, float]:
        """This worker's bytes per detector-input pixel (`page_memory.ENGINE_BYTES_KEY`), what
        the memory budget charges a page's detector input: its detectors' largest; nothing where
        it runs no detector or cannot read its peak memory."""
        dets = [stage for stage in self.predictors if stage_kind(stage) == "det"]
        if not dets:
            return {}
        # Every model set's detector (`serving.model_sets`), the largest charged: pages do not
        # say which set reads them where the budget is kept (PP-OCRv6 small's detector holds
        # about twice PP-OCRv5 mobile's per pixel: docs/models.md).
        found = [measure_det_bytes_per_px(self.predictors[s], self.stages[s].output) for s in dets]
        known = [value for value in found if value is not None]
        measured = max(known) if known else None
        per_px = measured or DEFAULT_ENGINE_BYTES_PER_DET_PX
        self.release_above_px = int(self.setup.engine_retain_bytes / per_px)
        return {} if measured is None else {ENGINE_BYTES_KEY: round(measured, 1)}

    def serve(self) -> None:
        """Run batches until told to stop. A batch for a staged predictor (`StagedPredictor`)
        is launched and left running while the worker waits for whichever comes first, the next
        batch (collated, and its copy issued, while this one computes) or this one's end; the
        main process sends up to `inflight_batches` at once. Other predictors run each batch as
        it arrives."""
        completions = Completions()
        running: deque[tuple[int, RunningBatch]] = deque()
        self.cpu_mark_s = time.process_time()
        try:
            while True:
                if running and len(running) < self.spec.engine.options.inflight_batches:
                    ready = wait([self.conn, completions.reader])
                    if self.conn not in ready:
                        self._send_oldest(running, completions)
                        continue
                elif running:
                    self._send_oldest(running, completions)
                    continue
                try:
                    message = self.conn.recv()
                except EOFError:
                    return
                if message[0] == "stop":
                    while running:
                        self._send_oldest(running, completions)
                    return
                _, batch_id, stage, refs, alone = message
                cpu_started_s = time.process_time()
                batch = self.start_batch(stage, refs, alone=alone)
                batch.cpu_started_s = cpu_started_s
                running.append((batch_id, batch))
                completions.submit(batch.wait)
                del message, refs, batch
        finally:
            completions.close()

    def _send_oldest(
        self, running: deque[tuple[int, RunningBatch]], completions: Completions
    ) -> None:
        completions.take()
        batch_id, batch = running.popleft()
        outcomes = batch.finish()
        now_s = time.process_time()
        cpu = BatchCpu(
            batch_s=now_s - batch.cpu_started_s,
            between_s=max(0.0, batch.cpu_started_s - self.cpu_mark_s),
        )
        self.cpu_mark_s = now_s
        self.conn.send(("done", batch_id, outcomes, cpu))
        del batch, outcomes
        # Never while the engine runs a batch: a batch of a predictor that is not staged ran
        # to its end in `start_batch`.
        if self.release_pending and all(other.slot is None for _, other in running):
            for stage, predictor in self.predictors.items():  # every model set's detector
                if stage_kind(stage) == "det":
                    release_engine_memory(predictor)
            self.release_pending = False
            release_free_heap()
        elif not running and not self.conn.poll():  # idle: no batch waits on the trim
            release_free_heap()

    def start_batch(
        self, stage: str, refs: list[shm.ShmRef], *, alone: bool = False
    ) -> RunningBatch:
        """Collate a batch into the predictor's page-locked slot and launch it, or (predictors
        that are not staged) run it now; `alone` (the device's other workers idle, nothing
        queued): on the predictor's threads for that (`models.base.AloneRunner`)."""
        predictor = self.predictors[stage]
        large = sum(math.prod(ref.shape) for ref in refs) > 3 * self.release_above_px
        if stage_kind(stage) == "det" and large:
            self.release_pending = True  # (n, 3, h, w) inputs: 3 values a pixel
        if not isinstance(predictor, StagedPredictor):
            return RunningBatch(outcomes=self.run_batch(stage, refs, alone=alone))
        rows = [ref.shape[0] for ref in refs]
        shape = (sum(rows), *refs[0].shape[1:])
        # An engine that normalises on its device gets the pixels as they are (a quarter of the
        # bytes in page-locked memory and over the copy); others get them normalised here.
        pixel_input = predictor if isinstance(predictor, PixelInput) else None
        if any(np.dtype(ref.dtype) != np.uint8 for ref in refs):
            pixel_input = None
        on_device = pixel_input is not None
        try:
            slot = pixel_input.stage_pixels(shape) if pixel_input else predictor.stage(shape)
        except Exception:
            logger.exception("cannot stage a %s batch on %s", stage, self.spec.name)
            return RunningBatch(outcomes=self.run_batch(stage, refs))
        try:
            if on_device:  # straight from shared memory into page-locked memory
                shm.take_into(refs, slot.input, unlink=False)
                slot.sizes = row_sizes([ref.shape for ref in refs], [ref.sizes for ref in refs])
            else:  # normalised on the way
                collate(self.norms.get(stage, stage), refs, slot.input)
        except (OSError, ValueError) as err:
            slot.release()
            logger.exception("cannot collate a %s batch", stage)
            return RunningBatch(
                outcomes=[ItemFailed(PredictorFailed(f"Bad {stage} input: {err}"))] * len(refs)
            )
        try:
            predictor.launch(slot)
        except Exception as err:
            _raise_if_fault(err, stage)
            slot.release()
            logger.warning(
                "%s batch of %d failed to launch; running it again",
                stage,
                len(refs),
                exc_info=True,
            )
            return RunningBatch(outcomes=self.run_batch(stage, refs))
        return RunningBatch(
            slot=slot, finish_slot=functools.partial(self._finish, stage, refs, rows)
        )

    def _finish(
        self, stage: str, refs: list[shm.ShmRef], rows: list[int], slot: Slot
    ) -> list[ItemOk | ItemFailed]:
        try:
            output = slot.result()
            if output.shape[0] != sum(rows):
                raise PredictorFailed(f"{stage} returned {output.shape[0]} rows for {sum(rows)}")
            return item_outcomes(self.stages[stage], output, rows, self.setup.shm_prefix)
        except Exception as err:
            _raise_if_fault(err, stage)
            logger.warning(
                "%s batch of %d failed; running it again", stage, len(refs), exc_info=True
            )
        finally:
            slot.release()
        # The inputs are still in shared memory: the synchronous path retries items alone.
        return self.run_batch(stage, refs)

    def run_batch(
        self, stage: str, refs: list[shm.ShmRef], *, alone: bool = False
    ) -> list[ItemOk | ItemFailed]:
        rows = [ref.shape[0] for ref in refs]
        try:
            batch = np.empty((sum(rows), *refs[0].shape[1:]), dtype=np.float32)
            # Inputs stay in place until the main process has the outcome, so that the batch can be
            # retried on another worker if this process dies.
            collate(self.norms.get(stage, stage), refs, batch)
        except (OSError, ValueError) as err:
            logger.exception("cannot collate a %s batch", stage)
            return [ItemFailed(PredictorFailed(f"Bad {stage} input: {err}"))] * len(refs)
        try:
            return self._run_split(stage, batch, rows, alone=alone)
        except Exception as err:
            _raise_if_fault(err, stage)
            if len(refs) == 1:
                logger.exception("%s inference failed on %s", stage, self.spec.name)
                return [ItemFailed(PredictorFailed())]
            logger.warning("%s batch of %d failed; retrying items alone", stage, len(refs))
        outcomes: list[ItemOk | ItemFailed] = []
        start = 0
        for n in rows:
            try:
                outcomes.extend(self._run_split(stage, batch[start : start + n], [n]))
            except Exception as err:
                _raise_if_fault(err, stage)
                logger.exception("%s inference failed on %s", stage, self.spec.name)
                outcomes.append(ItemFailed(PredictorFailed()))
            start += n
        return outcomes

    def _run_split(
        self, stage: str, batch: np.ndarray, rows: list[int], *, alone: bool = False
    ) -> list[ItemOk | ItemFailed]:
        output = self._predict(stage, batch, alone=alone)
        if output.shape[0] != batch.shape[0]:
            raise PredictorFailed(f"{stage} returned {output.shape[0]} rows for {batch.shape[0]}")
        return item_outcomes(self.stages[stage], output, rows, self.setup.shm_prefix)

    def _predict(self, stage: str, batch: np.ndarray, *, alone: bool) -> np.ndarray:
        """Run `batch` on the stage's predictor: alone on its threads for that, where it has
        them (`models.base.AloneRunner`: a second compiled model). Of the detector's two, one
        at a time keeps working memory, what the memory budget counts on: where a detector
        batch runs on the other one than the last, the engine releases its memory first (a
        lone page after pages in company, or back)."""
        predictor = self.predictors[stage]
        alone = alone and isinstance(predictor, AloneRunner)
        if stage == "det":
            if self.det_alone is not None and alone != self.det_alone:
                release_engine_memory(predictor)
            self.det_alone = alone
        if alone:
            return cast(AloneRunner, predictor).run_alone(batch)
        return predictor.run(batch)  # type: ignore[no-any-return]

    def close(self) -> None:
        for predictor in self.predictors.values():
            predictor.close()


@dataclass(frozen=True, slots=True)
class BatchCpu:
    """A device worker's CPU time (every thread of the process: the engine's too), as it answers
    a batch: what `ocr_device_cpu_seconds` adds up per stage."""

    batch_s: float
    """From receiving the batch to answering it: collating and normalising its pixels, the
    engine, reducing and placing its outputs. With batches in flight at once (GPUs) their spans
    overlap, and each counts what the process did meanwhile."""
    between_s: float
    """Since the answer before, outside any batch: releasing the detector's working memory,
    trimming the heap, reading the pipe."""


@dataclass(slots=True, kw_only=True)
class RunningBatch:
    """A batch a worker started: its outcomes already, or a launched slot to finish."""

    outcomes: list[ItemOk | ItemFailed] | None = None
    slot: Slot | None = None
    finish_slot: Callable[[Slot], list[ItemOk | ItemFailed]] | None = None
    cpu_started_s: float = 0.0
    """The process's CPU time when the batch arrived (`BatchCpu`)."""

    def wait(self) -> None:
        """Block until the device is done with the batch (never raises)."""
        if self.slot is not None:
            self.slot.wait()

    def finish(self) -> list[ItemOk | ItemFailed]:
        """The outcomes, waiting for the device if the batch is still running."""
        if self.outcomes is None:
            if self.slot is None or self.finish_slot is None:
                raise RuntimeError("a running batch has neither outcomes nor a slot")
            self.outcomes = self.finish_slot(self.slot)
            self.slot = None
        return self.outcomes


def collate(stage: str, refs: list[shm.ShmRef], out: np.ndarray) -> None:
    """Copy the items' inputs into consecutive rows of `out` (float32), normalising uint8 pixels
    to the model's input as `pipelines.pixels.normalize` defines for `stage` (float32 inputs are
    copied as they are). The inputs stay in shared memory.

    Raises:
        ValueError: the inputs do not fit `out`, or mix dtypes.
    """
    dtypes = {np.dtype(ref.dtype) for ref in refs}
    if dtypes != {np.dtype(np.uint8)}:
        if dtypes != {np.dtype(np.float32)}:
            raise ValueError(f"a {stage} batch of {sorted(map(str, dtypes))} inputs")
        shm.take_into(refs, out, unlink=False)
        return
    pixels = np.empty(out.shape, np.uint8)
    shm.take_into(refs, pixels, unlink=False)
    sizes = row_sizes([ref.shape for ref in refs], [ref.sizes for ref in refs])
    normalize(cast(Stage, stage_kind(stage)), pixels, sizes, out=out)


def item_outcomes(
    stage: ModelStage[Any], output: np.ndarray, rows: list[int], shm_prefix: str
) -> list[ItemOk | ItemFailed]:
    """Split a batch's output back into its items (`rows` each) and reduce each item's part as
    its stage defines; large outputs (detection maps) leave in shared memory, the rest inline."""
    outcomes: list[ItemOk | ItemFailed] = []
    start = 0
    for n in rows:
        value = stage.output(output[start : start + n])
        start += n
        outcomes.append(ItemOk(shm.put(value, shm_prefix) if stage.large_output else value))
    return outcomes


def isolate_gpu(spec: DeviceSpec, environ: MutableMapping[str, str]) -> DeviceSpec:
    """A `gpu:N` worker sees GPU N alone (`CUDA_VISIBLE_DEVICES`), as its device 0, so that no
    engine opens a context on another GPU; call before any engine initialises CUDA. An existing
    `CUDA_VISIBLE_DEVICES` list is indexed, not replaced."""
    if device_kind(spec.device) != "gpu":
        return spec
    ordinal = int(spec.device.split(":", 1)[1])
    visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    environ["CUDA_VISIBLE_DEVICES"] = visible[ordinal] if ordinal < len(visible) else str(ordinal)
    options = dataclasses.replace(spec.engine.options, device="gpu:0")
    return dataclasses.replace(spec, engine=dataclasses.replace(spec.engine, options=options))


def device_worker_main(spec: DeviceSpec, setup: WorkerSetup, conn: Connection) -> None:
    """Process entry point: load, warm up with a real page, report ready, serve until told."""
    die_with_parent()
    if not setup.inspectable:
        forbid_inspection()  # its environment and memory unreadable to a hijacked CPU worker

    process_name = f"device[{spec.name}]"
    configure_logging(setup.log_level, process_name=process_name, log_format=setup.log_format)
    # Paddle warns about a missing ccache at import; it compiles nothing here.
    warnings.filterwarnings("ignore", message="No ccache found")
    # The main process handles SIGINT/SIGTERM and stops workers in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spec = isolate_gpu(spec, os.environ)
    worker = DeviceWorkerChild(spec=spec, setup=setup, conn=conn)
    try:
        worker.load()
        # Importing paddle lowers the root logger to WARNING; restore ours.
        configure_logging(setup.log_level, process_name=process_name, log_format=setup.log_format)
        info = worker.warm_up()
    except Exception as err:
        logger.exception("device worker %s failed to start", spec.name)
        conn.send(("fatal", f"{type(err).__name__}: {err}"))
        return
    info["pid"] = os.getpid()
    info.update(precision_report(worker.predictors, worker.spec.engine.options))
    info.update(compile_report(worker.predictors))
    logger.info("device worker %s ready: %s", spec.name, info)  # the checks logged their own
    if worker.precision_checks:
        info[PRECISION_CHECKS_KEY] = {
            stage: check.describe() for stage, check in worker.precision_checks.items()
        }
    conn.send(("ready", info))
    try:
        try:
            worker.serve()
        except Exception as err:
            if not is_device_fault(err):
                raise
            # The context is lost: closing the engines could hang on it. The batches this
            # process held run again on the fresh process the pool starts (`device_pool`).
            logger.critical("device worker %s exits: %s", spec.name, err, exc_info=True)
            with contextlib.suppress(OSError, ValueError):
                # Said before the exit: the pool sees the pipe close before it can reap us.
                conn.send(("fault", str(err)))
            logging.shutdown()
            os._exit(DEVICE_FAULT_EXIT_CODE)
    finally:
        worker.close()
