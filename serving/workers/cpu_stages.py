"""Stage functions that CPU worker processes run: decode, and the page pipeline's steps.

The steps are `pipelines.page`'s, adapted to cross processes: they take and return small picklable
values, while the page, its model inputs and its line crops travel as shared-memory references
(`serving.workers.shm`). Worker-wide state (the CTC label table, the segment prefix) is set
once per process by `init_cpu_worker`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from models.spec import load_model_spec
from pipelines import page as pipeline
from pipelines.crop import CropsTooLarge
from pipelines.page import PageState, Step
from pipelines.page_orientation import OriParams
from pipelines.rec_postprocess import build_charset
from pipelines.types import ClsParams, DetParams, PageResult, RecParams
from serving.decode import documents
from serving.decode.readers import DecodeLimits, FileKind
from serving.errors import ValidationFailed
from serving.proc import die_with_parent
from serving.workers import shm
from serving.workers.page_pictures import PictureLimits, visualize_page

_CHARSET: tuple[str, ...] = ()
_CHARSETS: dict[str, tuple[str, ...]] = {}
"""The other model sets' CTC labels, by set name (`serving.model_sets`)."""
_PREFIX = ""


def init_cpu_worker(
    rec_model_dir: str, prefix: str, set_rec_dirs: dict[str, str] | None = None
) -> None:
    """Process initializer: read the label table from the recogniser's model directory (a path
    keeps the start-up data small; the table is ~18,000 labels), and those of the other model
    sets' recognisers (`set_rec_dirs`: set name -> directory), keep the segment prefix; one
    OpenCV thread."""
    die_with_parent()
    set_worker_state(_labels(rec_model_dir), prefix)
    _CHARSETS.clear()
    _CHARSETS.update({name: _labels(d) for name, d in (set_rec_dirs or {}).items()})
    cv2.setNumThreads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _labels(rec_model_dir: str) -> tuple[str, ...]:
    return build_charset(load_model_spec(Path(rec_model_dir), "rec").character_dict)


def set_worker_state(charset: tuple[str, ...], prefix: str) -> None:
    """Set this process's CTC labels and segment prefix (what `init_cpu_worker` reads from the
    model; tests that run the stage functions in process set them directly)."""
    global _CHARSET, _PREFIX
    _CHARSET = charset
    _PREFIX = prefix


@dataclass(frozen=True, slots=True)
class SharedCrops:
    """A page's line crops, one after another in one segment."""

    data: shm.ShmRef
    shapes: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class SharedStep:
    """A `pipelines.page.Step` with its arrays in shared memory: the model inputs and the crops.

    The main process submits `inputs` for inference and hands the step, with the outputs, to the
    next stage function; the state itself is small and travels inline.
    """

    state: PageState
    """The page's state, less its crops (they wait in `crops`)."""
    inputs: tuple[shm.ShmRef, ...]
    """One uint8 (n, 3, h, w) batch of pixels per entry of `state.batches`, for
    `state.awaiting` (`pipelines.pixels`: the device worker normalises them, `ShmRef.sizes`
    saying where the padding is)."""
    crops: SharedCrops | None = None

    def refs(self) -> list[shm.ShmRef]:
        """Segments this value owns."""
        return [*self.inputs, *([self.crops.data] if self.crops is not None else [])]


@dataclass(frozen=True, slots=True)
class PreparedPage:
    """A decoded page in shared memory, and its first step (page orientation, or detection)."""

    image: shm.ShmRef
    step: SharedStep

    def refs(self) -> list[shm.ShmRef]:
        """Segments this value owns."""
        return [self.image, *self.step.refs()]


def page_sizes(
    source: shm.ShmRef | bytes | str, kind: FileKind, limits: DecodeLimits, index: int | None
) -> list[tuple[int, int]]:
    """(width, height) of every page of a document, or of page `index`, from its headers: what
    the memory budget charges before any page is decoded (`serving.decode.documents.page_sizes`)."""
    return documents.page_sizes(_bytes_or_path(source), kind, limits, index=index)


def page_plans(
    source: shm.ShmRef | bytes | str, kind: FileKind, limits: DecodeLimits, index: int | None
) -> list[documents.PagePlan]:
    """`page_sizes` with each page's size as sent (`serving.decode.documents.page_plans`)."""
    return documents.page_plans(_bytes_or_path(source), kind, limits, index=index)


def stage_document(path: str, kind: FileKind, limits: DecodeLimits) -> int:
    """A job's stored document counted and readied (`serving.decode.documents.stage_document`): the
    server hands its path to a worker rather than parse an untrusted file itself."""
    return documents.stage_document(path, kind, limits)


def staging_plan(path: str, kind: FileKind, limits: DecodeLimits) -> documents.StagingPlan:
    """What readying a job's stored document will decode, from its headers
    (`serving.decode.documents.staging_plan`)."""
    return documents.staging_plan(path, kind, limits)


def _bytes_or_path(source: shm.ShmRef | bytes | str) -> bytes | str:
    """A document staged in shared memory (it stays there for its other pages) as bytes."""
    if isinstance(source, shm.ShmRef):
        return shm.take(source, unlink=False).tobytes()
    return source


def prepare_page_of(
    source: shm.ShmRef | bytes | str,
    kind: FileKind,
    index: int,
    limits: DecodeLimits,
    det_params: DetParams,
    ori_params: OriParams | None = None,
) -> PreparedPage:
    """Decode page `index` of a document (staged in shared memory, bytes, or a file's path) and
    prepare it for the page-orientation classifier (`ori_params` given) or for detection.

    Documents are decoded one page a call, so a page holds memory only while it is in flight.
    """
    image = documents.decode_page(_bytes_or_path(source), kind, index, limits)
    if ori_params is not None:
        step = pipeline.prepare_orientation(image, ori_params)
    else:
        step = pipeline.prepare(image, det_params)
    image_ref = shm.put(image, _PREFIX)
    try:
        return PreparedPage(image=image_ref, step=_share(step))
    except BaseException:
        shm.discard(image_ref)
        raise


@dataclass(frozen=True, slots=True)
class OrientedPage:
    """A page after the orientation classifier: its detection step, and the page turned upright
    when the classifier turned it (None: read the page as sent)."""

    upright: shm.ShmRef | None
    step: SharedStep

    def refs(self) -> list[shm.ShmRef]:
        """Segments this value owns."""
        return [*([self.upright] if self.upright is not None else []), *self.step.refs()]


def after_ori(
    step: SharedStep,
    probs: Sequence[np.ndarray],
    image: shm.ShmRef,
    det_params: DetParams,
    ori_params: OriParams,
) -> OrientedPage:
    """`pipelines.page.after_ori` on the page in shared memory; a turned page goes to a segment
    of its own (the page as sent stays: its pictures are drawn on it)."""
    page = shm.view(image)
    upright, det_step = pipeline.after_ori(_state(step), page, probs, det_params, ori_params)
    upright_ref = shm.put(upright, _PREFIX) if upright is not page else None
    try:
        return OrientedPage(upright=upright_ref, step=_share(det_step))
    except BaseException:
        if upright_ref is not None:
            shm.discard(upright_ref)
        raise


def after_det(
    step: SharedStep,
    maps: Sequence[shm.ShmRef],
    image: shm.ShmRef,
    det_params: DetParams,
    rec_params: RecParams,
    cls_params: ClsParams | None,
) -> SharedStep:
    """`pipelines.page.after_det` on the page and the detection map in shared memory."""
    # Inputs stay until the caller knows the outcome: a killed worker leaves them for the retry.
    # Read in place: the crops are cut straight from the shared page, the map not copied out.
    prob_maps = [shm.view(ref) for ref in maps]
    page = shm.view(image)
    try:
        after = pipeline.after_det(
            _state(step), page, prob_maps, det_params, rec_params, cls_params
        )
    except CropsTooLarge as err:
        raise ValidationFailed(
            f"{err}, which this page's memory charge holds: lower det_unclip_ratio or raise "
            "det_box_thresh (/ocr: textDetUnclipRatio, textDetBoxThresh)"
        ) from err
    return _share(after)


def after_cls(step: SharedStep, probs: Sequence[np.ndarray], rec_params: RecParams) -> SharedStep:
    """`pipelines.page.after_cls` on the crops in shared memory."""
    return _share(pipeline.after_cls(_state(step), probs, rec_params))


def finish(
    step: SharedStep,
    outputs: Sequence[tuple[np.ndarray, np.ndarray]],
    image: shm.ShmRef,
    rec_params: RecParams,
    visualize: PictureLimits | None,
    model_set: str = "",
) -> tuple[PageResult, dict[str, str]]:
    """`pipelines.page.finish`, and the page's pictures within `visualize` if asked."""
    charset = _CHARSETS[model_set] if model_set else _CHARSET
    result = pipeline.finish(_state(step), outputs, rec_params, charset)
    images: dict[str, str] = {}
    if visualize is not None:
        images = visualize_page(shm.view(image), result, visualize)
    return result, images


def _share(step: Step) -> SharedStep:
    """The step with its arrays moved to shared memory (all or none of them)."""
    refs: list[shm.ShmRef] = []
    try:
        for pixels in step.pixels:
            refs.append(shm.put(pixels.data, _PREFIX, pixels.sizes))
        crops = None
        if step.state.crops:
            # One copy each, straight into the segment.
            flat = shm.put_parts(list(step.state.crops), _PREFIX)
            crops = SharedCrops(flat, tuple(c.shape for c in step.state.crops))
    except BaseException:
        for ref in refs:
            shm.discard(ref)
        raise
    state = dataclasses.replace(step.state, crops=())
    return SharedStep(state=state, inputs=tuple(refs), crops=crops)


def _state(step: SharedStep) -> PageState:
    """The step's state with its crops read back from shared memory."""
    if step.crops is None:
        return step.state
    flat = shm.view(step.crops.data)
    crops = []
    start = 0
    for shape in step.crops.shapes:
        size = math.prod(shape)
        crops.append(flat[start : start + size].reshape(shape))
        start += size
    return dataclasses.replace(step.state, crops=tuple(crops))
