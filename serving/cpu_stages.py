"""Stage functions that CPU worker processes run: decode, pre/post-processing, CTC decoding.

Each takes and returns small picklable values; images and tensors travel as shared-memory
references (`serving.shm`). Worker-wide state (the CTC label table, the segment prefix) is set once
per process by `init_cpu_worker`.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from models.spec import load_model_spec
from pipelines.cls_postprocess import apply_orientation
from pipelines.cls_preprocess import plan_cls_batches
from pipelines.det_preprocess import preprocess_det
from pipelines.ocr import assemble_page, detect_lines, gather_orientations, gather_rec_results
from pipelines.rec_postprocess import build_charset
from pipelines.rec_preprocess import plan_rec_chunks
from pipelines.types import ClsParams, DetInput, DetParams, PageResult, RecParams
from serving import documents, shm
from serving.inputs import DecodeLimits, FileKind
from serving.proc import die_with_parent

_CHARSET: tuple[str, ...] = ()
_PREFIX = ""


def init_cpu_worker(rec_model_dir: str, prefix: str) -> None:
    """Process initializer: read the label table from the recogniser's model directory (a path
    keeps the start-up data small; the table is ~18,000 labels), keep the segment prefix; one
    OpenCV thread."""
    die_with_parent()
    global _CHARSET, _PREFIX
    _CHARSET = build_charset(load_model_spec(Path(rec_model_dir), "rec").character_dict)
    _PREFIX = prefix
    cv2.setNumThreads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@dataclass(frozen=True, slots=True)
class PreparedPage:
    """A decoded page and its detector input, both in shared memory."""

    image: shm.ShmRef
    det_tensor: shm.ShmRef
    """float32 (1, 3, H, W)."""
    src_h: int
    src_w: int
    ratio_h: float
    ratio_w: float

    def refs(self) -> list[shm.ShmRef]:
        """Segments this value owns."""
        return [self.image, self.det_tensor]


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """One padded chunk of crops for rec (or cls), in shared memory."""

    indices: tuple[int, ...]
    tensor: shm.ShmRef

    @property
    def width(self) -> int:
        """Padded width: the batching bucket."""
        return self.tensor.shape[-1]


@dataclass(frozen=True, slots=True)
class DetectedPage:
    """What detection found on a page, and the next stage's inputs."""

    polys: np.ndarray
    rec_chunks: list[ChunkRef] = field(default_factory=list)
    cls_batches: list[ChunkRef] = field(default_factory=list)
    crops: list[np.ndarray] = field(default_factory=list)
    """Kept only while the classifier has yet to run."""

    def refs(self) -> list[shm.ShmRef]:
        """Segments this value owns."""
        return [c.tensor for c in (*self.rec_chunks, *self.cls_batches)]


def page_sizes(
    source: shm.ShmRef | bytes | str, kind: FileKind, limits: DecodeLimits, index: int | None
) -> list[tuple[int, int]]:
    """(width, height) of every page of a document, or of page `index`, from its headers: what
    the memory budget charges before any page is decoded (`serving.documents.page_sizes`)."""
    return documents.page_sizes(_bytes_or_path(source), kind, limits, index=index)


def _bytes_or_path(source: shm.ShmRef | bytes | str) -> bytes | str:
    """A document staged in shared memory (it stays there for its other pages) as bytes."""
    if isinstance(source, shm.ShmRef):
        return shm.take(source, unlink=False).tobytes()
    return source


def after_det(
    page: PreparedPage,
    prob_map: shm.ShmRef,
    det_params: DetParams,
    rec_params: RecParams,
    cls_params: ClsParams | None,
) -> DetectedPage:
    """DB postprocess, sort, crop, then plan the classifier batches or recognition chunks."""
    image = shm.take(page.image, unlink=False)
    # The map stays until the caller knows the outcome: a killed worker leaves it for the retry.
    det_map = shm.take(prob_map, unlink=False)
    det_input = DetInput(
        tensor=np.empty((0,), np.float32),
        src_h=page.src_h,
        src_w=page.src_w,
        ratio_h=page.ratio_h,
        ratio_w=page.ratio_w,
    )
    polys, crops = detect_lines(image, det_map[0], det_input, det_params)
    if cls_params is not None:
        batches = [
            ChunkRef(indices, shm.put(tensor, _PREFIX))
            for indices, tensor in plan_cls_batches(crops, cls_params)
        ]
        return DetectedPage(polys=polys, cls_batches=batches, crops=crops)
    return DetectedPage(polys=polys, rec_chunks=_rec_chunks(crops, rec_params))


def after_cls(
    detected: DetectedPage, probs: Sequence[np.ndarray], rec_params: RecParams
) -> tuple[list[int], list[ChunkRef]]:
    """Turn crops the classifier flagged by 180 degrees, then plan recognition chunks."""
    batches = [(b.indices, np.empty(0)) for b in detected.cls_batches]
    orientations = gather_orientations(batches, probs, len(detected.crops))
    crops = apply_orientation(detected.crops, orientations)
    return orientations, _rec_chunks(crops, rec_params)


def _rec_chunks(crops: list[np.ndarray], rec_params: RecParams) -> list[ChunkRef]:
    return [
        ChunkRef(chunk.indices, shm.put(chunk.tensor, _PREFIX))
        for chunk in plan_rec_chunks(crops, rec_params)
    ]


def finish_page(
    page: PreparedPage,
    polys: np.ndarray,
    chunks: Sequence[tuple[int, ...]],
    outputs: Sequence[tuple[np.ndarray, np.ndarray]],
    orientations: Sequence[int] | None,
    rec_params: RecParams,
    visualize: bool,
) -> tuple[PageResult, dict[str, str]]:
    """CTC-decode the recogniser's outputs and assemble the page (and its pictures if asked)."""
    from pipelines.types import RecChunk

    plan = [RecChunk(indices=i, tensor=np.empty(0)) for i in chunks]
    texts_scores = gather_rec_results(plan, outputs, _CHARSET, len(polys))
    result = assemble_page(page.src_w, page.src_h, polys, texts_scores, orientations, rec_params)
    images: dict[str, str] = {}
    if visualize:
        image = shm.take(page.image, unlink=False)
        images = visualize_page(image, result)
    return result, images


def visualize_page(image: np.ndarray, result: PageResult) -> dict[str, str]:
    """PaddleX's `inputImage` and `ocrImage` as base64 JPEGs, at most 2000 x 2000.

    `ocrImage` draws the recognised boxes over the page; PaddleX adds a panel with the text
    rendered in a CJK font, which is left out here (the text is in `rec_texts`).
    """
    drawn = image.copy()
    for line in result.lines:
        cv2.polylines(drawn, [line.poly.astype(np.int32).reshape(-1, 1, 2)], True, (0, 0, 255), 2)
    return {"inputImage": _jpeg_b64(image), "ocrImage": _jpeg_b64(drawn)}


def _jpeg_b64(image: np.ndarray, max_side: int = 2000) -> str:
    h, w = image.shape[:2]
    scale = min(1.0, max_side / max(h, w))
    if scale < 1.0:
        image = cv2.resize(image, (max(1, int(w * scale)), max(1, int(h * scale))))
    ok, buf = cv2.imencode(".jpg", image)
    if not ok:
        raise ValueError("JPEG encoding failed")
    return base64.b64encode(buf.tobytes()).decode("ascii")


def prepare_page_of(
    source: shm.ShmRef | bytes | str,
    kind: FileKind,
    index: int,
    limits: DecodeLimits,
    det_params: DetParams,
) -> PreparedPage:
    """Decode page `index` of a document (staged in shared memory, bytes, or a file's path) and
    prepare it for detection.

    Documents are decoded one page a call, so a page holds memory only while it is in flight.
    """
    image = documents.decode_page(_bytes_or_path(source), kind, index, limits)
    det_input = preprocess_det(image, det_params)
    image_ref = shm.put(image, _PREFIX)
    try:
        det_ref = shm.put(det_input.tensor[np.newaxis], _PREFIX)
    except BaseException:
        shm.discard(image_ref)
        raise
    return PreparedPage(
        image=image_ref,
        det_tensor=det_ref,
        src_h=det_input.src_h,
        src_w=det_input.src_w,
        ratio_h=det_input.ratio_h,
        ratio_w=det_input.ratio_w,
    )
