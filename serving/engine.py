"""Models as the server uses them: specs, per-request parameters, predictors, in-process engine."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from models.embedded import resolve_model_dir
from models.gpu_predictor import GpuPredictor
from models.paddle_predictor import EngineOptions, PaddlePredictor
from models.spec import ModelSpec, load_model_spec
from pipelines.ocr import run_page
from pipelines.rec_postprocess import build_charset, reduce_rec_output
from pipelines.types import ClsParams, DetParams, PageResult, RecParams
from serving.config import (
    PIPELINE_RANGES,
    AppConfig,
    EngineConfig,
    ModelsConfig,
    PipelineConfig,
    in_range,
    range_text,
)
from serving.errors import ValidationFailed


@dataclass(frozen=True, slots=True, kw_only=True)
class OcrOptions:
    """Per-request settings, after request overrides were applied to the config defaults."""

    det: DetParams
    rec: RecParams
    cls: ClsParams | None
    """None when the textline-orientation classifier does not run for this request."""


@dataclass(frozen=True, kw_only=True)
class ModelBundle:
    """The det, rec and optional cls model specs of one server."""

    det: ModelSpec
    rec: ModelSpec
    cls: ModelSpec | None

    @property
    def model_dirs(self) -> dict[str, str]:
        """Stage -> model directory."""
        dirs = {"det": str(self.det.directory), "rec": str(self.rec.directory)}
        if self.cls is not None:
            dirs["cls"] = str(self.cls.directory)
        return dirs

    @cached_property
    def charset(self) -> tuple[str, ...]:
        """CTC labels of the recogniser."""
        return build_charset(self.rec.character_dict)

    def options(self, pipeline: PipelineConfig, **overrides: Any) -> OcrOptions:
        """Request options: config defaults, then the request's overrides (None = default).

        Raises:
            ValidationFailed: an override is out of range (`check_overrides`).
        """
        check_overrides(overrides)
        det_cfg = pipeline.det
        model_det = self.det.det_params or DetParams()
        det = DetParams(
            limit_side_len=_pick(overrides.get("limit_side_len"), det_cfg.limit_side_len),
            limit_type=_pick(overrides.get("limit_type"), det_cfg.limit_type),
            max_side_limit=_pick(overrides.get("max_side_limit"), det_cfg.max_side_limit),
            thresh=_pick(overrides.get("thresh"), det_cfg.thresh),
            box_thresh=_pick(overrides.get("box_thresh"), det_cfg.box_thresh),
            unclip_ratio=_pick(overrides.get("unclip_ratio"), det_cfg.unclip_ratio),
            max_candidates=model_det.max_candidates,
        )
        model_rec = self.rec.rec_params or RecParams()
        rec = dataclasses.replace(
            model_rec,
            batch_size=pipeline.rec.batch_size,
            score_thresh=_pick(overrides.get("score_thresh"), pipeline.rec.score_thresh),
        )
        use_cls = _pick(
            overrides.get("use_textline_orientation"), pipeline.use_textline_orientation
        )
        cls = None
        if use_cls and self.cls is not None:
            cls = self.cls.cls_params
        return OcrOptions(det=det, rec=rec, cls=cls)


def check_overrides(overrides: Mapping[str, Any]) -> None:
    """Refuse numeric overrides outside `config.PIPELINE_RANGES`; None means "not given".

    Raises:
        ValidationFailed: naming the option, its range and the value.
    """
    for name in PIPELINE_RANGES:
        value = overrides.get(name)
        if value is not None and not in_range(name, value):
            raise ValidationFailed(f"{name} must be {range_text(name)}, got {value!r:.40}")


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value


def load_bundle(models: ModelsConfig) -> ModelBundle:
    """Locate and read the configured models (embedded or on disk)."""
    det = load_model_spec(resolve_model_dir(models.det), "det")
    rec = load_model_spec(resolve_model_dir(models.rec), "rec")
    cls = load_model_spec(resolve_model_dir(models.cls), "cls") if models.cls else None
    return ModelBundle(det=det, rec=rec, cls=cls)


def engine_options(engine: EngineConfig, device: str, cpu_threads: int) -> EngineOptions:
    """Predictor settings for one device from the `[engine]` section."""
    gpu = device.startswith("gpu:")
    return EngineOptions(
        device=device,
        cpu_threads=cpu_threads,
        enable_mkldnn=engine.enable_mkldnn and not gpu,
        mkldnn_cache_capacity=engine.mkldnn_cache_capacity,
        gpu_memory_pool_mb=engine.gpu_memory_pool_mb,
        precision="fp16" if gpu and engine.precision == "fp16" else "fp32",
        use_tensorrt=engine.use_tensorrt and gpu,
        trt_workspace_bytes=engine.trt_workspace_bytes,
        trt_min_subgraph_size=engine.trt_min_subgraph_size,
        trt_use_static=bool(engine.trt_cache_dir),
        trt_cache_dir=engine.trt_cache_dir or None,
    )


def create_predictor(
    stage: str, model_dir: str, engine: EngineOptions, device: str, max_rows: int
) -> Any:
    """A predictor for `stage` on `device` (the device worker's default factory).

    On a GPU each instance gets its own stream and pinned staging (`GpuPredictor`); TensorRT
    profiles are sized for the largest batch the instance pulls (`max_rows`).
    """
    spec = load_model_spec(Path(model_dir), stage)
    if device.startswith("gpu:"):
        options = dataclasses.replace(engine, device=device, trt_max_batch_size=max_rows)
        return GpuPredictor(spec, options)
    return PaddlePredictor(spec, dataclasses.replace(engine, device=device))


class LocalEngine:
    """The whole pipeline in this process, page after page: the offline engine limit."""

    def __init__(self, config: AppConfig, device: str = "cpu") -> None:
        self.bundle = load_bundle(config.models)
        self.config = config
        options = engine_options(config.engine, device, config.cpu_threads)
        self.predictors: dict[str, PaddlePredictor] = {}
        for stage, spec in (("det", self.bundle.det), ("rec", self.bundle.rec)):
            self.predictors[stage] = PaddlePredictor(spec, options)
        if self.bundle.cls is not None:
            self.predictors["cls"] = PaddlePredictor(self.bundle.cls, options)

    def load(self) -> None:
        """Create the predictors."""
        for predictor in self.predictors.values():
            predictor.load()

    def ocr(self, image: np.ndarray, options: OcrOptions | None = None) -> PageResult:
        """OCR one BGR page."""
        options = options or self.bundle.options(self.config.pipeline)
        return ocr_page(self.predictors, image, options, self.bundle.charset)


def ocr_page(
    predictors: dict[str, Any], image: np.ndarray, options: OcrOptions, charset: Sequence[str]
) -> PageResult:
    """Run `pipelines.ocr.run_page` with in-process predictors."""
    cls = predictors.get("cls") if options.cls is not None else None
    return run_page(
        image,
        det=predictors["det"].run,
        rec=lambda batch: reduce_rec_output(predictors["rec"].run(batch)),
        cls=cls.run if cls is not None else None,
        det_params=options.det,
        rec_params=options.rec,
        cls_params=options.cls or ClsParams(),
        charset=charset,
    )
