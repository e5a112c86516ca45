"""Per-request OCR settings: the config's pipeline defaults, the models' own settings, the
request's options (`serving.options.OPTIONS`, under the native API's names) and the server's
batch shapes, made into the pipeline's parameters here and nowhere else."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.bundle import ModelBundle
from pipelines.page_orientation import OriParams
from pipelines.types import ClsParams, DetParams, RecParams
from serving.config import PipelineConfig
from serving.errors import ValidationFailed
from serving.model_sets import ModelSets
from serving.options import OPTIONS, check_choice, check_overrides
from serving.scheduling.batch_shapes import BatchShapes

NO_CLASSIFIER = "textline_orientation=true needs a classifier (models.cls)"
"""The native API's answer when the classifier is asked for and none is configured."""
NO_PAGE_CLASSIFIER = (
    "orientation=auto (useDocOrientationClassify on /ocr) needs a page-orientation model "
    "(models.ori)"
)
"""The answer when page orientation is asked for and no page classifier is configured."""
FLAGS: dict[str, bool] = {"true": True, "1": True, "false": False, "0": False}
"""What a boolean query parameter may be (any case): `words=yes` used to read as false."""
_QUERY_ORDER = (float, int, str, bool)
"""`/v1/ocr` reads its query parameters by kind: the numbers (floats first), the limit type, the
flag; the first bad one is the one reported."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OcrOptions:
    """Per-request settings, after request overrides were applied to the config defaults."""

    det: DetParams
    rec: RecParams
    cls: ClsParams | None
    """None when the textline-orientation classifier does not run for this request."""
    model_set: str = ""
    """The model set reading the request (`serving.model_sets`); "" = the default set."""
    stages: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Model kind -> the stage (queue) its set's model runs in; kinds not here: their own."""

    def stage(self, kind: str) -> str:
        """The stage (queue) that runs this request's `kind` model."""
        return self.stages.get(kind, kind)

    ori: OriParams | None = None
    """None when the page-orientation classifier does not run for this request."""


def ocr_options(
    bundle: ModelBundle,
    pipeline: PipelineConfig,
    *,
    sets: ModelSets | None = None,
    shapes: BatchShapes | None = None,
    **overrides: Any,
) -> OcrOptions:
    """A request's options: the config's defaults, then the request's `overrides` (named as in
    `OPTIONS`; None = default), for the model set the request's `lang` or `model` picks among
    `sets` (`ModelSets.pick`; None: `bundle` is the one set), padded to the server's batch
    `shapes` (bucketed batching; None: exact, as PaddleOCR).

    Raises:
        ValidationFailed: an override is out of range (`check_overrides`), or no set served
            reads the request's `lang` or is named its `model`.
        TypeError: an override no option has that name (a caller's mistake, never a client's:
            every API checks the names it reads).
    """
    unknown = sorted(set(overrides) - OPTIONS.keys())
    if unknown:
        raise TypeError(f"ocr_options got unknown options {unknown}; the options are {[*OPTIONS]}")
    check_overrides(overrides)
    sets = sets if sets is not None else ModelSets.single(bundle)
    model_set = sets.pick(overrides.get("lang"), overrides.get("model"))
    options = _set_options(model_set.bundle, pipeline, shapes, overrides)
    if model_set is sets.default:
        return options
    return dataclasses.replace(options, model_set=model_set.name, stages=dict(model_set.stages))


def _set_options(
    bundle: ModelBundle,
    pipeline: PipelineConfig,
    shapes: BatchShapes | None,
    overrides: Mapping[str, Any],
) -> OcrOptions:
    """`ocr_options` for the models of one set: each option's value made into the pipeline's
    parameter of the same setting (`Option.default`: `det_thresh` into `det.thresh`)."""
    det_cfg = pipeline.det
    model_det = bundle.det.det_params or DetParams()
    det = DetParams(
        limit_side_len=_pick(overrides.get("det_limit_side_len"), det_cfg.limit_side_len),
        limit_type=_pick(overrides.get("det_limit_type"), det_cfg.limit_type),
        max_side_limit=det_cfg.max_side_limit,
        thresh=_pick(overrides.get("det_thresh"), det_cfg.thresh),
        box_thresh=_pick(overrides.get("det_box_thresh"), det_cfg.box_thresh),
        unclip_ratio=_pick(overrides.get("det_unclip_ratio"), det_cfg.unclip_ratio),
        max_candidates=model_det.max_candidates,
    )
    model_rec = bundle.rec.rec_params or RecParams()
    rec = dataclasses.replace(
        model_rec,
        batch_size=pipeline.rec.batch_size,
        score_thresh=_pick(overrides.get("score_thresh"), pipeline.rec.score_thresh),
    )
    if shapes is not None:  # bucketed batching (`serving.scheduling.batch_shapes`)
        det = dataclasses.replace(det, pad_step_px=shapes.det_step_px)
        rec = dataclasses.replace(rec, pad_widths_px=shapes.rec_widths_px)
    use_cls = _pick(overrides.get("textline_orientation"), pipeline.use_textline_orientation)
    cls = None
    if use_cls and bundle.cls is not None:
        cls = bundle.cls.cls_params
    return OcrOptions(det=det, rec=rec, cls=cls, ori=_ori_params(bundle, pipeline, overrides))


def _ori_params(
    bundle: ModelBundle, pipeline: PipelineConfig, overrides: Mapping[str, Any]
) -> OriParams | None:
    """The page classifier's settings when it runs for this request: `orientation` "auto" (the
    request's, else the config's) and a classifier configured."""
    mode = _pick(overrides.get("orientation"), pipeline.orientation)
    if mode != "auto" or bundle.ori is None or bundle.ori.ori_params is None:
        return None
    return dataclasses.replace(bundle.ori.ori_params, min_score=pipeline.orientation_min_score)


def request_options(
    bundle: ModelBundle,
    pipeline: PipelineConfig,
    overrides: Mapping[str, Any],
    *,
    no_classifier: str,
    sets: ModelSets | None = None,
    shapes: BatchShapes | None = None,
) -> OcrOptions:
    """`ocr_options` for a request, which may not ask for a classifier that is not configured.

    Raises:
        ValidationFailed: `no_classifier` (each API words it its own way) when the request asks
            for the textline-orientation classifier and no model is configured; the same for
            page orientation (`NO_PAGE_CLASSIFIER`); an override out of range.
    """
    if overrides.get("textline_orientation") and bundle.cls is None:
        raise ValidationFailed(no_classifier)
    if overrides.get("orientation") == "auto" and bundle.ori is None:
        raise ValidationFailed(NO_PAGE_CLASSIFIER)
    return ocr_options(bundle, pipeline, sets=sets, shapes=shapes, **overrides)


def query_overrides(params: Mapping[str, str]) -> dict[str, Any]:
    """`/v1/ocr`'s query parameters as `ocr_options` overrides; other parameters are ignored.

    Flags are `parse_flag`'s; ranges are checked by `ocr_options`.

    Raises:
        ValidationFailed: a number that does not parse, a string that is none of its option's
            choices, a flag that is neither true nor false.
    """
    given = [(name, option) for name, option in OPTIONS.items() if name in params]
    given.sort(key=lambda item: _QUERY_ORDER.index(item[1].kind))
    overrides: dict[str, Any] = {}
    for name, option in given:
        text = params[name]
        if option.kind is bool:
            overrides[name] = parse_flag(name, text)
        elif option.kind is str:
            overrides[name] = check_choice(name, text) if option.choices else text
        else:
            try:
                overrides[name] = option.kind(text)
            except ValueError as err:
                raise ValidationFailed(f"Bad query parameter: {err}") from err
    return overrides


def parse_flag(name: str, text: str) -> bool:
    """A boolean query parameter: true or 1, false or 0, in any case (`FLAGS`).

    Raises:
        ValidationFailed: anything else, naming the parameter and what it may be.
    """
    value = FLAGS.get(text.strip().lower())
    if value is None:
        raise ValidationFailed(f"{name} must be true or false (or 1 or 0), got {text[:40]!r}")
    return value


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value
