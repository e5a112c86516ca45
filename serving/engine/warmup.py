"""The warm-up page every device worker runs before it reports ready."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from models.bundle import load_bundle
from serving.config import PipelineConfig
from serving.engine.local import ocr_page
from serving.model_sets import STAGE_SEP, set_stage, stage_kind
from serving.proc import release_free_heap
from serving.request_options import ocr_options

WARMUP_TEXT = ("Warm-up page 2026", "OCR server 0123456789")
MIN_LINE_SIMILARITY = 0.9
"""How close each warm-up line must read (normalised Levenshtein similarity): exact on the CPU
engines; fp16 on a GPU may change a character; a broken engine reads nothing or garbage."""


class WarmupMismatch(RuntimeError):
    """The warm-up page did not read as it should: the worker's engine gives wrong answers."""


def warmup_image() -> np.ndarray:
    """A small white page with two printed lines (drawn with OpenCV, so no font files)."""
    image = np.full((240, 640, 3), 255, dtype=np.uint8)
    for i, line in enumerate(WARMUP_TEXT):
        cv2.putText(image, line, (20, 80 + 90 * i), cv2.FONT_HERSHEY_SIMPLEX, 1.3, (0, 0, 0), 2)
    return image


def warm_up_page(predictors: dict[str, Any], model_dirs: dict[str, str]) -> list[str]:
    """Run the warm-up page through the stages this worker has; returns the texts found.

    A worker limited to some stages warms up only those, on inputs shaped like a real page's.
    The page-orientation classifier runs a zero input of its shape: the warm-up page is a strip
    of two lines, not a page whose orientation the classifier knows.
    """
    bundle = load_bundle(**{k: v for k, v in model_dirs.items() if STAGE_SEP not in k})
    _warm_up_sets(predictors, model_dirs)
    options = ocr_options(
        bundle,
        PipelineConfig(),
        textline_orientation="cls" in predictors,
        orientation="off",
    )
    image = warmup_image()
    if "ori" in predictors:
        predictors["ori"].warmup()
    if "det" in predictors and "rec" in predictors:
        page = ocr_page(predictors, image, options, bundle.charset)
        return [line.text for line in page.lines]
    for stage, predictor in predictors.items():
        if stage != "ori":
            predictor.warmup()
    return []


def _warm_up_sets(predictors: dict[str, Any], model_dirs: dict[str, str]) -> None:
    """The other model sets' models (`serving.model_sets`: stages "rec@NAME", "det@NAME") read
    the warm-up page too, with the default's for the stages they share, checked as the
    default's are; a worker with only some of a set's stages warms those up."""
    shared = {stage: p for stage, p in predictors.items() if STAGE_SEP not in stage}
    names = dict.fromkeys(s.partition(STAGE_SEP)[2] for s in predictors if STAGE_SEP in s)
    for name in names:
        own = {stage_kind(s): p for s, p in predictors.items() if s.endswith(STAGE_SEP + name)}
        merged = {**shared, **own}
        if "det" not in merged or "rec" not in merged:
            for predictor in own.values():
                predictor.warmup()
            continue
        det_dir = model_dirs.get(set_stage("det", name), model_dirs["det"])
        set_bundle = load_bundle(det_dir, model_dirs[set_stage("rec", name)])
        options = ocr_options(set_bundle, PipelineConfig(), orientation="off")
        page = ocr_page(merged, warmup_image(), options, set_bundle.charset)
        check_warmup_texts([line.text for line in page.lines], merged)


def check_warmup_texts(texts: list[str], predictors: dict[str, Any]) -> None:
    """Refuse a worker whose warm-up page read wrong: its device would serve wrong text.

    Checked where the worker runs both det and rec on real models: predictors that answer
    without one (fakes) say so with a false `reads_text` attribute.

    Raises:
        WarmupMismatch: a line is missing, extra, or reads too differently.
    """
    if "det" not in predictors or "rec" not in predictors:
        return
    if any(not getattr(p, "reads_text", True) for p in predictors.values()):
        return
    from rapidfuzz.distance import Levenshtein

    close = len(texts) == len(WARMUP_TEXT) and all(
        Levenshtein.normalized_similarity(got, want) >= MIN_LINE_SIMILARITY
        for got, want in zip(texts, WARMUP_TEXT, strict=True)
    )
    if not close:
        raise WarmupMismatch(
            f"the warm-up page read {texts!r}, expected {list(WARMUP_TEXT)!r}: "
            "this engine, device or precision gives wrong results"
        )


MEASURE_SIDE_PX = 960
"""Side of the detector input `measure_det_bytes_per_px` runs: larger than the warm-up page's, so
that the engine allocates anew, and small enough to take about a second on one CPU core."""


def measure_det_bytes_per_px(
    predictor: Any, output: Callable[[np.ndarray], Any], side_px: int = MEASURE_SIDE_PX
) -> float | None:
    """Bytes this process grows by per detector-input pixel while it runs one detector batch of
    `side_px` x `side_px`, as the worker runs a page's: the batch copy, the engine's working memory
    for that shape, the output and its reduction (`output`). What the memory budget charges a
    page's detector input on this engine (`serving.scheduling.page_memory`).

    Read from the peak resident memory, reset before the run (Linux's `clear_refs`), against the
    resident memory before it; the engine's memory for the shape is released after
    (`release_memory`, where the engine has it). None where the peak cannot be reset or read.
    """
    release_engine_memory(predictor)
    release_free_heap()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current VmRSS
        before = _status_bytes("VmRSS")
    except (OSError, ValueError):
        return None
    batch = np.full((1, 3, side_px, side_px), 0.5, dtype=np.float32)  # touched, as a copy is
    kept = output(predictor.run(batch))
    try:
        peak = _status_bytes("VmHWM")
    except (OSError, ValueError):
        return None
    finally:
        del batch, kept
        release_engine_memory(predictor)
        release_free_heap()
    return max(0.0, (peak - before) / (side_px * side_px))


def release_engine_memory(predictor: Any) -> None:
    """Ask an engine to free the working memory it keeps for the shapes it has run (OpenVINO's
    `release_memory`); engines without such a call keep theirs."""
    release = getattr(predictor, "release_memory", None)
    if callable(release):
        release()


def _status_bytes(field: str) -> int:
    """A `kB` field of /proc/self/status, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0]) * 1024
    raise ValueError(f"no {field} in /proc/self/status")
