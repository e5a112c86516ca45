"""Page composition: the OCR stages chained as PaddleOCR 3.7's OCR pipeline chains them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from pipelines.cls_postprocess import apply_orientation, classify_orientation
from pipelines.cls_preprocess import plan_cls_batches
from pipelines.crop import crop_text_lines, sort_quad_boxes
from pipelines.det_postprocess import postprocess_det
from pipelines.det_preprocess import preprocess_det
from pipelines.rec_postprocess import decode_ctc
from pipelines.rec_preprocess import plan_rec_chunks
from pipelines.types import (
    ClsParams,
    DetInput,
    DetParams,
    PageResult,
    RecChunk,
    RecParams,
    TextLine,
)

DetFn = Callable[[np.ndarray], np.ndarray]
"""(1, 3, H, W) float32 batch -> (1, 1, H, W) probability map."""
RecFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""(n, 3, 48, W) float32 batch -> `reduce_rec_output` pair, each of shape (n, T)."""
ClsFn = Callable[[np.ndarray], np.ndarray]
"""(n, 3, h, w) float32 batch -> (n, num_classes) probabilities."""
ClsBatch = tuple[tuple[int, ...], np.ndarray]

NO_ORIENTATION = -1


def detect_lines(
    image: np.ndarray, prob_map: np.ndarray, det_input: DetInput, det_params: DetParams
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Turns the detector's map into sorted quads and their line crops.

    Args:
        image: The BGR page that `det_input` was made from.
        prob_map: The detector's (H, W) probability map.
        det_input: The page's prepared detector input.
        det_params: Detection thresholds.

    Returns:
        PaddleOCR's `dt_polys` (int16, (N, 4, 2), reading order, quads with empty crops dropped)
        and one crop per quad.
    """
    polys = sort_quad_boxes(postprocess_det(prob_map, det_input, det_params))
    crops, kept = crop_text_lines(image, polys)
    return kept, crops


def gather_orientations(
    batches: Sequence[ClsBatch], probs: Sequence[np.ndarray], num_crops: int
) -> list[int]:
    """Collects the classifier's answers for `plan_cls_batches` batches into crop order.

    Args:
        batches: The batches from `plan_cls_batches`.
        probs: The classifier's (n, num_classes) output for each batch, in the same order.
        num_crops: How many crops the batches were planned from.

    Returns:
        One class id per crop.

    Raises:
        ValueError: If the outputs do not match the batches.
    """
    if len(batches) != len(probs):
        raise ValueError(f"{len(batches)} classifier batches but {len(probs)} outputs")
    class_ids = [NO_ORIENTATION] * num_crops
    for (indices, _), batch_probs in zip(batches, probs, strict=True):
        ids = classify_orientation(batch_probs)
        if len(ids) != len(indices):
            raise ValueError(f"classifier returned {len(ids)} rows for {len(indices)} crops")
        for i, class_id in zip(indices, ids, strict=True):
            class_ids[i] = class_id
    return class_ids


def gather_rec_results(
    chunks: Sequence[RecChunk],
    outputs: Sequence[tuple[np.ndarray, np.ndarray]],
    charset: Sequence[str],
    num_crops: int,
) -> list[tuple[str, float]]:
    """Decodes the recogniser's answers for `plan_rec_chunks` chunks into crop order.

    Args:
        chunks: The chunks from `plan_rec_chunks`.
        outputs: `reduce_rec_output` pairs for each chunk, in the same order.
        charset: Labels from `build_charset`.
        num_crops: How many crops the chunks were planned from.

    Returns:
        One (text, score) pair per crop.

    Raises:
        ValueError: If the outputs do not match the chunks or leave a crop without a result.
    """
    if len(chunks) != len(outputs):
        raise ValueError(f"{len(chunks)} recognition chunks but {len(outputs)} outputs")
    results: list[tuple[str, float] | None] = [None] * num_crops
    for chunk, (indices, max_probs) in zip(chunks, outputs, strict=True):
        decoded = decode_ctc(indices, max_probs, charset)
        if len(decoded) != len(chunk.indices):
            raise ValueError(f"recogniser returned {len(decoded)} rows for {len(chunk.indices)}")
        for i, result in zip(chunk.indices, decoded, strict=True):
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
) -> PageResult:
    """Builds the page result; keeps lines whose score is at least `rec_params.score_thresh`.

    Args:
        width: Page width in pixels.
        height: Page height in pixels.
        polys: `dt_polys` from `detect_lines`.
        texts_scores: One (text, score) pair per quad.
        orientations: One classifier class id per quad, or None when the classifier is off.
        rec_params: Holds the score threshold.

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
    lines = [
        TextLine(text=text, score=score, poly=poly, orientation=angle)
        for poly, (text, score), angle in zip(dt_polys, texts_scores, angles, strict=True)
        if score >= rec_params.score_thresh
    ]
    return PageResult(
        width=width, height=height, dt_polys=dt_polys, lines=lines, orientations=angles
    )


def run_page(
    image: np.ndarray,
    *,
    det: DetFn,
    rec: RecFn,
    cls: ClsFn | None,
    det_params: DetParams,
    rec_params: RecParams,
    cls_params: ClsParams,
    charset: Sequence[str],
) -> PageResult:
    """Runs OCR on one BGR page in process, calling the given predictors batch by batch.

    Args:
        image: BGR uint8 page of shape (H, W, 3).
        det: Text detector.
        rec: Text recogniser, followed by `reduce_rec_output`.
        cls: Textline-orientation classifier, or None to skip that step.
        det_params: Detection settings.
        rec_params: Recognition settings.
        cls_params: Classifier settings (unused when `cls` is None).
        charset: Labels from `build_charset`.

    Returns:
        The page result, identical to PaddleOCR's for the same models and settings.

    Raises:
        ValueError: If the image or a predictor output has an unexpected shape.
    """
    det_input = preprocess_det(image, det_params)
    det_out = np.asarray(det(det_input.tensor[np.newaxis]))
    if det_out.ndim != 4 or det_out.shape[:2] != (1, 1):
        raise ValueError(f"expected a (1, 1, H, W) detector output, got {det_out.shape}")
    polys, crops = detect_lines(image, det_out[0, 0], det_input, det_params)
    orientations: list[int] | None = None
    if cls is not None:
        batches = plan_cls_batches(crops, cls_params)
        orientations = gather_orientations(batches, [cls(t) for _, t in batches], len(crops))
        crops = apply_orientation(crops, orientations)
    chunks = plan_rec_chunks(crops, rec_params)
    texts_scores = gather_rec_results(chunks, [rec(c.tensor) for c in chunks], charset, len(crops))
    return assemble_page(
        int(image.shape[1]), int(image.shape[0]), polys, texts_scores, orientations, rec_params
    )
