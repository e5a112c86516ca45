"""The engine each device worker runs, from `[engine]`: a registered backend and its options, and
how each stage reads its predictor's answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.base import ArgmaxOutput, ByteMapOutput, EngineBackendError
from models.engine_options import EngineOptions, device_kind
from models.openvino_backend import OpenVinoPredictor
from models.openvino_precision import PrecisionChoice, summarise
from models.registry import EngineChoice
from models.torch_precision import choose_precision
from pipelines.stages import MODEL_STAGES, ModelStage
from serving.config import STAGES, AppConfig, EngineConfig
from serving.engine.gpu_choice import AUTO, choose_gpu_engine
from serving.model_sets import stage_kind


def engine_options(
    engine: EngineConfig,
    device: str,
    cpu_threads: int,
    *,
    inflight_batches: int = 1,
    lone_threads: int = 0,
    max_batch_rows: tuple[tuple[str, int], ...] = (),
    backend: str | None = None,
) -> EngineOptions:
    """Predictor settings for one device ("cpu" or "gpu:N") from the `[engine]` section, the
    batches its worker holds at once (`workers.<kind>.inflight_batches`) and the threads of a
    batch it runs alone (CPU device workers; 0: none), for `backend` (None: the one configured
    for the device's kind; a GPU's "auto" counts as torch).

    `engine.precision` is resolved for the device and backend (`models.torch_precision`);
    TensorRT applies to GPUs only, oneDNN to the CPU only.
    """
    kind = device_kind(device)
    gpu = kind == "gpu"
    backend = backend or engine.backend_for(kind)
    plan = choose_precision(
        engine.precision, gpu=gpu, backend="torch" if backend == AUTO else backend
    )
    return EngineOptions(
        device=device,
        cpu_threads=cpu_threads,
        lone_threads=0 if gpu else lone_threads,
        enable_mkldnn=engine.enable_mkldnn and not gpu,
        mkldnn_cache_capacity=engine.mkldnn_cache_capacity,
        gpu_memory_pool_mb=engine.gpu_memory_pool_mb,
        precision=plan.precision,
        precision_reason=plan.reason,
        precision_fallback=plan.fallback,
        allow_tf32=engine.allow_tf32 and gpu,
        use_tensorrt=engine.use_tensorrt and gpu,
        trt_workspace_bytes=engine.trt_workspace_bytes,
        trt_min_subgraph_size=engine.trt_min_subgraph_size,
        trt_use_static=bool(engine.trt_cache_dir),
        trt_cache_dir=engine.trt_cache_dir or None,
        onnx_dir=engine.onnx_dir,
        paddle_dir=engine.paddle_dir,
        # A GPU batches bucketed unless told exact (`serving.scheduling.batch_shapes`).
        torch=engine.torch.resolved(buckets=gpu and engine.batching != "exact"),
        max_batch_rows=max_batch_rows,
        openvino_precision=engine.openvino_precision,
        openvino_f32_head=engine.openvino_f32_head,
        openvino_bf16=engine.openvino_bf16,
        openvino_check=engine.openvino_precision_check,
        precision_check_dir=engine.precision_check_dir,
        inflight_batches=inflight_batches,
    )


def engine_choice(config: AppConfig, device: str, *, alone: bool = False) -> EngineChoice:
    """The backend configured for `device`'s kind, with options built for `device` itself;
    `alone`: for a device worker of the server, which may run batches alone
    (`AppConfig.cpu_lone_threads`).

    The one place `workers.<kind>.inflight_batches` becomes a limit: the main process's dispatch
    tasks per worker, the batches the worker holds launched, and its lane's page-locked slots
    all read it from these options.

    Raises:
        EngineBackendError: `engine.gpu_backend = "auto"` for a GPU, and no engine here uses one.
    """
    kind = device_kind(device)
    workers = config.workers.gpu if kind == "gpu" else config.workers.cpu
    backend = config.engine.backend_for(kind)
    if backend == AUTO:
        chosen = choose_gpu_engine()
        if chosen.backend is None:
            raise EngineBackendError(
                f"{device}: engine.gpu_backend = 'auto' found no engine that uses a GPU here: "
                f"{chosen.reason}"
            )
        backend = chosen.backend
    return EngineChoice(
        backend=backend,
        options=engine_options(
            config.engine,
            device,
            config.cpu_threads,
            inflight_batches=workers.inflight_batches,
            lone_threads=config.cpu_lone_threads if alone else 0,
            max_batch_rows=tuple((s, workers.limits(s).max_batch_size) for s in STAGES),
            backend=backend,
        ),
    )


def model_stages(predictors: Mapping[str, object]) -> dict[str, ModelStage[Any]]:
    """Each predictor's stage, as that predictor answers it. Where a stage reads only the argmax
    of its model's output and the engine can compute it next to the model (`ArgmaxOutput`: the
    torch engine), the predictor is asked to, and the stage reads its pairs. A detector that
    answers byte maps (`use_byte_maps`) is read as one. Idempotent."""
    stages: dict[str, ModelStage[Any]] = {}
    for name, predictor in predictors.items():
        stage = MODEL_STAGES[stage_kind(name)]  # "rec@PP-OCRv6_small" reads as "rec"
        if stage.argmax_output is not None and isinstance(predictor, ArgmaxOutput):
            predictor.output_argmax()
            stage = stage.reading_argmax()
        if (
            stage.byte_map_output is not None
            and isinstance(predictor, ByteMapOutput)
            and predictor.byte_map_thresh is not None
        ):
            stage = stage.reading_byte_map()
        stages[name] = stage
    return stages


def use_byte_maps(predictors: Mapping[str, object], thresh: float) -> None:
    """Ask every detector whose engine can (`ByteMapOutput`: the torch engine) to answer its map
    as bytes quantised where it runs, exact at `thresh` (`[pipeline.det] thresh`:
    `pipelines.det_byte_map`); `model_stages` then reads them so. Other engines answer the float
    map, which keeps the CPU engines' boxes PaddleOCR's."""
    for name, predictor in predictors.items():
        if stage_kind(name) == "det" and isinstance(predictor, ByteMapOutput):
            predictor.output_byte_map(thresh)


COMPILE_KEYS = ("compile", "compile_reason")
"""What `compile_report` adds to a torch device worker's ready report, and `/readyz` shows."""


def compile_report(predictors: Mapping[str, object]) -> dict[str, str]:
    """Whether a worker's torch models run compiled, and why (the setting, the warm-up's
    seconds, or why compiling was given up for eager), for its start-up log and `/readyz`;
    empty for other engines."""
    from models.torch_backend import TorchPredictor

    states = {
        stage: p.compile_state for stage, p in predictors.items() if isinstance(p, TorchPredictor)
    }
    if not states:
        return {}
    modes = sorted({state.mode for state in states.values()})
    reasons = []
    for stage, state in states.items():
        warmed = f", {state.graphs} shapes warmed in {state.warmup_s:.1f} s" if state.graphs else ""
        reasons.append(f"{stage}: {state.mode} ({state.reason}{warmed})")
    return {"compile": "/".join(modes), "compile_reason": "; ".join(reasons)}


PRECISION_CHECKS_KEY = "precision_checks"
"""Where a device worker's ready report, and `/readyz`, say what this CPU's precision check
found for each OpenVINO model (stage -> `models.precision_verdict.ModelCheck.describe`)."""
PRECISION_KEYS = ("precision", "precision_reason", "precision_layers", PRECISION_CHECKS_KEY)
"""What a device worker's ready report says of its precision, and `/readyz` shows."""


def precision_report(predictors: Mapping[str, object], options: EngineOptions) -> dict[str, str]:
    """Which precision a worker's loaded models run at, and why, for its start-up log and
    `/readyz`: OpenVINO's choice for each model (`models.openvino_precision`), else the options'
    `precision` and its reason (`models.torch_precision`)."""
    choices: dict[str, PrecisionChoice] = {
        stage: predictor.precision
        for stage, predictor in predictors.items()
        if isinstance(predictor, OpenVinoPredictor) and predictor.precision is not None
    }
    if choices:
        return summarise(choices)
    return {"precision": options.precision, "precision_reason": options.precision_reason}
