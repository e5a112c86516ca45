"""The OCR page pipeline as explicit steps between model calls, chained as PaddleOCR 3.7 does.

    [prepare_orientation -> ori -> after_ori] | prepare -> det -> after_det
        -> [cls -> after_cls] -> rec -> finish

With page orientation (`pipelines.page_orientation`), a page the classifier finds turned is
turned upright in `after_ori` and read upright; `finish` brings its boxes back into the page as
sent.

Each step takes the page's state and the outputs of the model calls that state waits for (as
`pipelines.stages` reduces them), and returns the next state with the inputs of the next model
calls. Steps are pure: arrays in, arrays out. `pipelines.ocr.run_page` drives them in one process;
the server drives the same steps in its CPU workers, with inference in device workers in between
(`serving.workers.cpu_stages`, `serving.service.ocr`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pipelines.cls_postprocess import apply_orientation, classify_orientation
from pipelines.cls_preprocess import plan_cls_batches
from pipelines.crop import crop_text_lines, sort_quad_boxes
from pipelines.det_postprocess import postprocess_det
from pipelines.det_preprocess import det_input_size, pad_det_input, preprocess_det
from pipelines.page_orientation import (
    OriParams,
    PageOrientation,
    classify_page,
    ori_pixels,
    sent_size,
    to_sent_box,
    to_sent_points,
    turn_upright,
)
from pipelines.pixels import Pixels
from pipelines.rec_postprocess import CtcPath, decode_ctc_paths
from pipelines.rec_preprocess import plan_rec_chunks
from pipelines.skew import estimate_skew
from pipelines.stages import Stage
from pipelines.types import ClsParams, DetParams, PageResult, RecParams, TextLine, Word
from pipelines.words import page_words

NO_ORIENTATION = -1
"""Orientation of a line when the classifier did not run."""


def _no_polys() -> np.ndarray:
    return np.zeros((0, 4, 2), np.int16)


@dataclass(frozen=True, slots=True, kw_only=True)
class PageState:
    """Where a page stands between two model calls: what the next step needs besides the
    outputs of those calls."""

    width: int
    height: int
    awaiting: Stage
    """The model whose outputs the next step takes."""
    batches: tuple[tuple[int, ...], ...]
    """One entry per awaited model call, in order: the crops its rows stand for (for det, the
    page: `(0,)`)."""
    polys: np.ndarray = field(default_factory=_no_polys)
    """`dt_polys` (int16, (N, 4, 2), reading order) once detection ran."""
    orientations: tuple[int, ...] | None = None
    """One classifier class id per quad once the classifier ran; None when it does not run."""
    crops: tuple[np.ndarray, ...] = ()
    """One BGR line crop per quad, kept only while the classifier has yet to run."""
    cls_min_score: float = 0.0
    """`ClsParams.min_upside_down_score` of the textline classifier awaited (`after_det`)."""
    orientation: PageOrientation | None = None
    """What the page-orientation classifier said, once it ran; None when it does not run. When
    it turned the page, `width`, `height` and `polys` are the upright page's until `finish`."""


@dataclass(frozen=True, slots=True)
class Step:
    """What a step returns: the page's new state and the inputs of the model calls it awaits."""

    state: PageState
    pixels: list[Pixels]
    """One uint8 (n, 3, h, w) batch per entry of `state.batches`: what crosses processes."""

    @property
    def inputs(self) -> list[np.ndarray]:
        """The float32 (n, 3, h, w) model inputs: `pixels` normalised for the awaited model."""
        return [p.normalized(self.state.awaiting) for p in self.pixels]


def prepare(image: np.ndarray, det_params: DetParams) -> Step:
    """Prepares one BGR page for the detector (`preprocess_det`).

    Raises:
        ValueError: If the image is not (H, W, 3) with positive sides, or the limit type is unknown.
    """
    det_input = preprocess_det(image, det_params)
    state = PageState(
        width=det_input.src_w, height=det_input.src_h, awaiting="det", batches=((0,),)
    )
    pixels = pad_det_input(det_input.pixels, det_params.pad_step_px)  # bucketed batching's
    _, input_h, input_w = det_input.pixels.shape
    sizes = () if pixels is det_input.pixels else ((input_h, input_w),)  # 0.0 in the padding
    return Step(state, [Pixels(pixels[np.newaxis], sizes)])


def prepare_orientation(image: np.ndarray, ori_params: OriParams) -> Step:
    """Prepares one BGR page for the page-orientation classifier (`resize_ori`).

    Raises:
        ValueError: If the image is not (H, W, 3) with positive sides.
    """
    height, width = image.shape[:2]
    state = PageState(width=width, height=height, awaiting="ori", batches=((0,),))
    return Step(state, [ori_pixels(image, ori_params)])


def after_ori(
    state: PageState,
    image: np.ndarray,
    probs: Sequence[np.ndarray],
    det_params: DetParams,
    ori_params: OriParams,
) -> tuple[np.ndarray, Step]:
    """Reads the classifier's answer, turns the page upright when it is sure, and prepares the
    page for the detector.

    Args:
        state: What `prepare_orientation` returned.
        image: The BGR page as sent.
        probs: The classifier's output (`stages.ORI`): one (1, 4) row.
        det_params: Detection settings.
        ori_params: Holds the labels and the score a page must reach to be turned.

    Returns:
        The page the pipeline reads from here on (turned upright, or `image` itself) and its
        detection step, whose state carries the orientation.

    Raises:
        ValueError: If the outputs do not match what the state awaits.
    """
    _check(state, "ori", probs)
    (page_probs,) = probs
    orientation = classify_page(page_probs, ori_params)
    upright = turn_upright(image, orientation.angle) if orientation.turned else image
    step = prepare(upright, det_params)
    return upright, Step(dataclasses.replace(step.state, orientation=orientation), step.pixels)


def after_det(
    state: PageState,
    image: np.ndarray,
    maps: Sequence[np.ndarray],
    det_params: DetParams,
    rec_params: RecParams,
    cls_params: ClsParams | None,
) -> Step:
    """DB postprocess, reading order and line crops; then plans the classifier's batches, or the
    recogniser's chunks when the classifier does not run (`cls_params` is None).

    Args:
        state: What `prepare` returned.
        image: The BGR page `prepare` was given.
        maps: The detector's output (`stages.DET`): one (1, H, W) probability map.
        det_params: Detection thresholds.
        rec_params: Recognition settings.
        cls_params: Classifier settings, or None to skip the classifier.

    Raises:
        ValueError: If the outputs do not match what the state awaits.
        CropsTooLarge: The page's crops would hold more than `CROP_PIXELS_PER_PAGE_PX` times
            its pixels (`crop_text_lines`).
    """
    _check(state, "det", maps)
    (prob_map,) = maps
    if prob_map.ndim != 3 or prob_map.shape[0] != 1:
        raise ValueError(f"expected a (1, H, W) detector output, got {prob_map.shape}")
    # The map of the page's own input, less what bucketed batching padded (`prepare`).
    input_h, input_w = det_input_size(state.height, state.width, det_params)
    prob_map = prob_map[:, :input_h, :input_w]
    quads = sort_quad_boxes(postprocess_det(prob_map[0], (state.height, state.width), det_params))
    crops, polys = crop_text_lines(image, quads, bounded=True)
    if cls_params is None:
        return _plan_rec(dataclasses.replace(state, polys=polys), crops, rec_params)
    batches = plan_cls_batches(crops, cls_params)
    detected = dataclasses.replace(
        state,
        awaiting="cls",
        batches=tuple(indices for indices, _ in batches),
        polys=polys,
        crops=tuple(crops),
        cls_min_score=cls_params.min_upside_down_score,
    )
    return Step(detected, [pixels for _, pixels in batches])


def after_cls(state: PageState, probs: Sequence[np.ndarray], rec_params: RecParams) -> Step:
    """Turns the crops the classifier found upside down, then plans the recogniser's chunks.

    Args:
        state: What `after_det` returned with classifier settings.
        probs: The classifier's output (`stages.CLS`) for each batch, in order.
        rec_params: Recognition settings.

    Raises:
        ValueError: If the outputs do not match what the state awaits.
    """
    _check(state, "cls", probs)
    orientations = gather_orientations(state.batches, probs, len(state.crops), state.cls_min_score)
    crops = apply_orientation(state.crops, orientations)
    classified = dataclasses.replace(state, orientations=tuple(orientations), crops=())
    return _plan_rec(classified, crops, rec_params)


def finish(
    state: PageState,
    outputs: Sequence[tuple[np.ndarray, np.ndarray]],
    rec_params: RecParams,
    charset: Sequence[str],
) -> PageResult:
    """CTC-decodes the recogniser's outputs and assembles the page.

    Args:
        state: What `after_det` (without classifier) or `after_cls` returned.
        outputs: The recogniser's output (`stages.REC`) for each chunk, in order.
        rec_params: Holds the score threshold.
        charset: Labels from `build_charset`.

    Returns:
        The page result, identical to PaddleOCR's for the same models and settings, with the
        page's skew (`pipelines.skew`) from its detected quads.

    Raises:
        ValueError: If the outputs do not match what the state awaits.
    """
    _check(state, "rec", outputs)
    paths = gather_rec_paths(state.batches, outputs, charset, len(state.polys))
    words = page_words(state.polys, state.batches, paths, state.orientations, rec_params)
    page = assemble_page(
        state.width,
        state.height,
        state.polys,
        [(path.text, path.score) for path in paths],
        state.orientations,
        rec_params,
        words=words,
    )
    page.skew = estimate_skew(state.polys)  # the same in the page as read and as sent
    if state.orientation is None:
        return page
    return to_sent_page(page, state.orientation)


def to_upright_page(page: PageResult) -> PageResult:
    """A page result (boxes in the page as sent) with its boxes and size in the page as read,
    turned upright: what a reader sees, for reading order and documents (`serving.outputs`).
    The page itself when it was not turned."""
    found = page.page_orientation
    if found is None or found.applied == 0:
        return page
    # The page as sent is the upright one turned by the angle's complement.
    back = PageOrientation(angle=(360 - found.applied) % 360, score=found.score, turned=True)
    return dataclasses.replace(to_sent_page(page, back), page_orientation=found)


def to_sent_page(page: PageResult, orientation: PageOrientation) -> PageResult:
    """A page read upright, with its boxes and size in the page as sent (which
    `turn_upright(sent, orientation.applied)` turned), and the orientation recorded.

    A quad keeps its points' order: its first point is still where its text starts, which on a
    page sent sideways is no longer its top left.
    """
    angle = orientation.applied
    width, height = page.width, page.height
    if angle == 0:
        return dataclasses.replace(page, page_orientation=orientation)

    def poly(points: np.ndarray) -> np.ndarray:
        return to_sent_points(points, angle, width, height)

    lines = [
        dataclasses.replace(
            line,
            poly=poly(line.poly),
            words=tuple(
                dataclasses.replace(word, box=to_sent_box(word.box, angle, width, height))
                for word in line.words
            ),
        )
        for line in page.lines
    ]
    sent_width, sent_height = sent_size(angle, width, height)
    return dataclasses.replace(
        page,
        width=sent_width,
        height=sent_height,
        dt_polys=[poly(p) for p in page.dt_polys],
        lines=lines,
        page_orientation=orientation,
    )


def _plan_rec(state: PageState, crops: Sequence[np.ndarray], rec_params: RecParams) -> Step:
    chunks = plan_rec_chunks(crops, rec_params)
    planned = dataclasses.replace(
        state, awaiting="rec", batches=tuple(c.indices for c in chunks), crops=()
    )
    return Step(planned, [c.pixels for c in chunks])


def _check(state: PageState, stage: Stage, outputs: Sequence[object]) -> None:
    if state.awaiting != stage:
        raise ValueError(f"the page awaits {state.awaiting} outputs, not {stage} outputs")
    if len(outputs) != len(state.batches):
        raise ValueError(f"{len(state.batches)} {stage} calls awaited but {len(outputs)} outputs")


def gather_orientations(
    batches: Sequence[tuple[int, ...]],
    probs: Sequence[np.ndarray],
    num_crops: int,
    min_upside_down_score: float = 0.0,
) -> list[int]:
    """Collects the classifier's answers into crop order.

    Args:
        batches: The crops of each classifier batch (`plan_cls_batches`' indices).
        probs: The classifier's (n, num_classes) output for each batch, in the same order.
        num_crops: How many crops the batches were planned from.
        min_upside_down_score: `ClsParams.min_upside_down_score`.

    Returns:
        One class id per crop.

    Raises:
        ValueError: If the outputs do not match the batches.
    """
    if len(batches) != len(probs):
        raise ValueError(f"{len(batches)} classifier batches but {len(probs)} outputs")
    class_ids = [NO_ORIENTATION] * num_crops
    for indices, batch_probs in zip(batches, probs, strict=True):
        ids = classify_orientation(batch_probs, min_upside_down_score)
        if len(ids) != len(indices):
            raise ValueError(f"classifier returned {len(ids)} rows for {len(indices)} crops")
        for i, class_id in zip(indices, ids, strict=True):
            class_ids[i] = class_id
    return class_ids


def gather_rec_results(
    chunks: Sequence[tuple[int, ...]],
    outputs: Sequence[tuple[np.ndarray, np.ndarray]],
    charset: Sequence[str],
    num_crops: int,
) -> list[tuple[str, float]]:
    """CTC-decodes the recogniser's answers into crop order: (text, score) of
    `gather_rec_paths`."""
    return [
        (path.text, path.score) for path in gather_rec_paths(chunks, outputs, charset, num_crops)
    ]


def gather_rec_paths(
    chunks: Sequence[tuple[int, ...]],
    outputs: Sequence[tuple[np.ndarray, np.ndarray]],
    charset: Sequence[str],
    num_crops: int,
) -> list[CtcPath]:
    """CTC-decodes the recogniser's answers into crop order, each character's step kept.

    Args:
        chunks: The crops of each recognition chunk (`plan_rec_chunks`' indices).
        outputs: `reduce_rec_output` pairs for each chunk, in the same order.
        charset: Labels from `build_charset`.
        num_crops: How many crops the chunks were planned from.

    Returns:
        One decoded path per crop.

    Raises:
        ValueError: If the outputs do not match the chunks or leave a crop without a result.
    """
    if len(chunks) != len(outputs):
        raise ValueError(f"{len(chunks)} recognition chunks but {len(outputs)} outputs")
    results: list[CtcPath | None] = [None] * num_crops
    for indices, (classes, max_probs) in zip(chunks, outputs, strict=True):
        decoded = decode_ctc_paths(classes, max_probs, charset)
        if len(decoded) != len(indices):
            raise ValueError(f"recogniser returned {len(decoded)} rows for {len(indices)}")
        for i, result in zip(indices, decoded, strict=True):
            results[i] = result
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        raise ValueError(f"no recognition result for crops {missing}")
    return [r for r in results if r is not None]


def assemble_page(
    width: int,
    height: int,
    polys: np.ndarray | Sequence[np.ndarray],
    texts_scores: Sequence[tuple[str, float]],
    orientations: Sequence[int] | None,
    rec_params: RecParams,
    *,
    words: Sequence[tuple[Word, ...]] | None = None,
) -> PageResult:
    """Builds the page result; keeps lines whose score is at least `rec_params.score_thresh`.

    Args:
        width: Page width in pixels.
        height: Page height in pixels.
        polys: `dt_polys`.
        texts_scores: One (text, score) pair per quad.
        orientations: One classifier class id per quad, or None when the classifier is off.
        rec_params: Holds the score threshold.
        words: One tuple of words per quad (`pipelines.words.page_words`), or None.

    Returns:
        The page, lines in `dt_polys` order.

    Raises:
        ValueError: If the per-quad sequences differ in length.
    """
    dt_polys = list(polys)
    angles = [NO_ORIENTATION] * len(dt_polys) if orientations is None else list(orientations)
    if not len(dt_polys) == len(texts_scores) == len(angles):
        raise ValueError(
            f"{len(dt_polys)} quads, {len(texts_scores)} results, {len(angles)} orientations"
        )
    line_words = [()] * len(dt_polys) if words is None else list(words)
    if len(line_words) != len(dt_polys):
        raise ValueError(f"{len(dt_polys)} quads, {len(line_words)} word lists")
    lines = [
        TextLine(text=text, score=score, poly=poly, orientation=angle, words=kept)
        for poly, (text, score), angle, kept in zip(
            dt_polys, texts_scores, angles, line_words, strict=True
        )
        if score >= rec_params.score_thresh
    ]
    return PageResult(
        width=width, height=height, dt_polys=dt_polys, lines=lines, orientations=angles
    )
