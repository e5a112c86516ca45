"""The page pipeline (`pipelines.page`) driven in one process, one model call after another."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from pipelines.page import (
    Step,
    after_cls,
    after_det,
    after_ori,
    finish,
    prepare,
    prepare_orientation,
)
from pipelines.page_orientation import OriParams
from pipelines.stages import MODEL_STAGES, ModelStage
from pipelines.types import ClsParams, DetParams, PageResult, RecParams

Model = Callable[[np.ndarray], np.ndarray]
"""A predictor: an (n, 3, h, w) float32 batch -> the model's raw output for its n rows."""

OutputT = TypeVar("OutputT")


def run_page(
    image: np.ndarray,
    *,
    det: Model,
    rec: Model,
    cls: Model | None,
    det_params: DetParams,
    rec_params: RecParams,
    cls_params: ClsParams,
    charset: Sequence[str],
    stages: Mapping[str, ModelStage[Any]] = MODEL_STAGES,
    ori: Model | None = None,
    ori_params: OriParams | None = None,
) -> PageResult:
    """Runs OCR on one BGR page in process, calling the given predictors batch by batch.

    Args:
        image: BGR uint8 page of shape (H, W, 3).
        det: Text detector: (1, 3, H, W) -> (1, 1, H, W) probability map.
        rec: Text recogniser: (n, 3, 48, W) -> (n, T, C) per-step class probabilities (or their
            argmax pairs, (n, T, 2), with `stages["rec"]` reading them).
        cls: Textline-orientation classifier, (n, 3, h, w) -> (n, C), or None to skip that step.
        det_params: Detection settings.
        rec_params: Recognition settings.
        cls_params: Classifier settings (unused when `cls` is None).
        charset: Labels from `build_charset`.
        stages: How each model's output is read: `MODEL_STAGES`, or a stage `reading_argmax`
            where its predictor answers with argmax pairs.
        ori: Page-orientation classifier, (1, 3, 224, 224) -> (1, 4), or None to read the page
            as sent.
        ori_params: Its settings (`OriParams()` when None).

    Returns:
        The page result, identical to PaddleOCR's for the same models and settings.

    Raises:
        ValueError: If the image or a predictor output has an unexpected shape.
    """
    if ori is not None:
        params = ori_params or OriParams()
        step = prepare_orientation(image, params)
        image, step = after_ori(
            step.state, image, _call(stages["ori"], ori, step), det_params, params
        )
    else:
        step = prepare(image, det_params)
    step = after_det(
        step.state,
        image,
        _call(stages["det"], det, step),
        det_params,
        rec_params,
        cls_params if cls is not None else None,
    )
    if cls is not None:
        step = after_cls(step.state, _call(stages["cls"], cls, step), rec_params)
    return finish(step.state, _call(stages["rec"], rec, step), rec_params, charset)


def _call(stage: ModelStage[OutputT], model: Model, step: Step) -> list[OutputT]:
    """Runs `model` on each input `step` awaits, reducing each output as `stage` defines."""
    return [stage.output(np.asarray(model(batch))) for batch in step.inputs]
