"""The whole OCR pipeline in this process, page after page: the offline engine limit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from models.base import Predictor
from models.bundle import load_bundle
from pipelines.ocr import run_page
from pipelines.types import ClsParams, PageResult
from serving.config import AppConfig
from serving.engine.choice import engine_choice, model_stages, use_byte_maps
from serving.model_sets import default_pair
from serving.request_options import OcrOptions, ocr_options


class LocalEngine:
    """Every stage's predictor in this process, on the backend `[engine]` names for `device`."""

    def __init__(self, config: AppConfig, device: str = "cpu") -> None:
        models = config.models
        self.bundle = load_bundle(models.det, models.rec, models.cls, models.ori)
        self.config = config
        engine = engine_choice(config, device)
        self.predictors: dict[str, Predictor] = {
            stage: engine.predictor(spec) for stage, spec in self.bundle.specs.items()
        }

    def load(self) -> None:
        """Create the predictors, at the precisions this CPU's check allows for OpenVINO
        (`serving.engine.precision_check`; measured once, then read from its cache)."""
        from serving.engine.precision_check import check_precisions

        check_precisions(self.predictors, [default_pair(self.bundle, self.config.models.langs)])
        model_stages(self.predictors)  # reduced outputs asked for first: each compiles once
        for predictor in self.predictors.values():
            predictor.load()
        # As the server's device workers read them (`serving.workers.device_worker`).
        use_byte_maps(self.predictors, self.config.pipeline.det.thresh)

    def ocr(self, image: np.ndarray, options: OcrOptions | None = None) -> PageResult:
        """OCR one BGR page."""
        options = options or ocr_options(self.bundle, self.config.pipeline)
        return ocr_page(self.predictors, image, options, self.bundle.charset)


def ocr_page(
    predictors: dict[str, Any], image: np.ndarray, options: OcrOptions, charset: Sequence[str]
) -> PageResult:
    """Run `pipelines.ocr.run_page` with in-process predictors (`model_stages`: each read as
    it answers)."""
    cls = predictors.get("cls") if options.cls is not None else None
    ori = predictors.get("ori") if options.ori is not None else None
    return run_page(
        image,
        det=predictors["det"].run,
        rec=predictors["rec"].run,
        cls=cls.run if cls is not None else None,
        det_params=options.det,
        rec_params=options.rec,
        cls_params=options.cls or ClsParams(),
        charset=charset,
        stages=model_stages(predictors),
        ori=ori.run if ori is not None else None,
        ori_params=options.ori,
    )
