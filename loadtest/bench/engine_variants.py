"""Benchmark of Paddle CPU engine variants (oneDNN on/off, pass workarounds) on the embedded models.

Run one venv at a time (each variant uses `--threads` cores)::

    PYTHONPATH=/work/main /path/to/venv/bin/python loadtest/bench/engine_variants.py

Prints a Markdown table of median (min) milliseconds per `run()` call, and how far each oneDNN
variant's outputs are from the oneDNN-off baseline on the same synthetic text inputs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from models.base import PredictorError
from models.embedded import embedded_model_dir
from models.engine_options import EngineOptions
from models.paddle_predictor import (
    ONEDNN_PLACEMENT_PASS,
    PaddlePredictor,
    onednn_fails_on_det,
    paddle_version,
)
from models.spec import ModelKind, load_model_spec

Shape = tuple[int, ...]
DET_SHAPES: tuple[Shape, ...] = ((1, 3, 736, 736), (1, 3, 960, 1248), (1, 3, 1216, 1568))
REC_SHAPES: tuple[Shape, ...] = ((6, 3, 48, 320), (6, 3, 48, 960))
DET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
DET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    """One engine configuration to time."""

    label: str
    mkldnn: bool
    delete_passes: tuple[str, ...] = ()
    auto_delete_passes: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """Result of one (variant, input shape) cell."""

    median_ms: float | None
    min_ms: float | None
    error: str | None
    output: np.ndarray | None


def variants_for(version: str) -> list[Variant]:
    """oneDNN off and on; on 3.3.x both the pass workaround and plain oneDNN (which fails)."""
    found = [Variant(label="oneDNN off", mkldnn=False), Variant(label="oneDNN", mkldnn=True)]
    if onednn_fails_on_det(version):
        found.insert(
            1,
            Variant(
                label=f"oneDNN - {ONEDNN_PLACEMENT_PASS}",
                mkldnn=True,
                delete_passes=(ONEDNN_PLACEMENT_PASS,),
            ),
        )
    return found


def _text_page(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    page = np.full((height, width, 3), 255, dtype=np.uint8)
    y = 40
    while y < height - 10:
        words = " ".join(f"Item{rng.integers(0, 10_000)}" for _ in range(8))
        cv2.putText(page, words, (20, y), cv2.FONT_HERSHEY_SIMPLEX, 0.9, (20, 20, 20), 2)
        y += int(rng.integers(36, 60))
    return page


def det_input(shape: Sequence[int], seed: int = 0) -> np.ndarray:
    """A synthetic text page normalised like PaddleOCR's det preprocessing (BGR, mean/std)."""
    n, _, height, width = shape
    page = _text_page(height, width, seed).astype(np.float32) / 255.0
    chw = ((page - DET_MEAN) / DET_STD).transpose(2, 0, 1)
    return np.ascontiguousarray(np.repeat(chw[np.newaxis], n, axis=0), dtype=np.float32)


def rec_input(shape: Sequence[int], seed: int = 1) -> np.ndarray:
    """Synthetic text-line crops normalised to [-1, 1] like PaddleOCR's rec preprocessing."""
    n, _, height, width = shape
    lines = []
    for i in range(n):
        crop = _text_page(height * 3, width, seed + i)[20:68]
        crop = cv2.resize(crop, (width, height)).astype(np.float32) / 255.0
        lines.append(((crop - 0.5) / 0.5).transpose(2, 0, 1))
    return np.ascontiguousarray(np.stack(lines), dtype=np.float32)


def _short(err: BaseException) -> str:
    text = str(err).replace("\n", " ")
    marker = "ConvertPirAttribute2RuntimeAttribute"
    return f"FAIL ({marker})" if marker in text else f"FAIL ({text[:60]})"


def _load(kind: ModelKind, variant: Variant, threads: int) -> PaddlePredictor | str:
    name = "PP-OCRv5_mobile_det" if kind == "det" else "PP-OCRv5_mobile_rec"
    spec = load_model_spec(embedded_model_dir(name), kind)
    options = EngineOptions(
        cpu_threads=threads,
        enable_mkldnn=variant.mkldnn,
        delete_passes=variant.delete_passes,
        auto_delete_passes=variant.auto_delete_passes,
    )
    predictor = PaddlePredictor(spec, options)
    try:
        predictor.load()
    except PredictorError as err:
        return _short(err)
    return predictor


def _failed(error: str) -> Timing:
    return Timing(median_ms=None, min_ms=None, error=error, output=None)


def measure(
    kind: ModelKind,
    shapes: Sequence[Shape],
    variants: Sequence[Variant],
    threads: int,
    warmups: int,
    repeats: int,
) -> dict[str, dict[Shape, Timing]]:
    """Time every (variant, shape) pair, one predictor per variant.

    The timed runs of the variants are interleaved (v1, v2, v3, v1, v2, ...), so that load from
    other processes on a shared machine hits every variant alike.
    """
    loaded = {v.label: _load(kind, v, threads) for v in variants}
    results: dict[str, dict[Shape, Timing]] = {v.label: {} for v in variants}
    make = det_input if kind == "det" else rec_input
    for shape in shapes:
        batch = make(shape)
        running: dict[str, PaddlePredictor] = {}
        outputs: dict[str, np.ndarray] = {}
        for label, predictor in loaded.items():
            if isinstance(predictor, str):
                results[label][shape] = _failed(predictor)
                continue
            try:
                outputs[label] = predictor.run(batch)
                for _ in range(warmups - 1):
                    predictor.run(batch)
            except PredictorError as err:
                results[label][shape] = _failed(_short(err))
                continue
            running[label] = predictor
        samples_ms: dict[str, list[float]] = {label: [] for label in running}
        for _ in range(repeats):
            for label, predictor in running.items():
                start = time.perf_counter()
                predictor.run(batch)
                samples_ms[label].append((time.perf_counter() - start) * 1000.0)
        for label, samples in samples_ms.items():
            results[label][shape] = Timing(
                median_ms=statistics.median(samples),
                min_ms=min(samples),
                error=None,
                output=outputs[label],
            )
    for predictor in loaded.values():
        if not isinstance(predictor, str):
            predictor.close()
    return results


def _cell(timing: Timing) -> str:
    if timing.error is not None or timing.median_ms is None or timing.min_ms is None:
        return timing.error or "FAIL"
    return f"{timing.median_ms:.0f} ({timing.min_ms:.0f})"


def _agreement(kind: ModelKind, baseline: Timing, other: Timing) -> str:
    if baseline.output is None or other.output is None:
        return "n/a"
    diff = float(np.max(np.abs(baseline.output - other.output)))
    if kind == "det":
        flips = int(np.count_nonzero((baseline.output > 0.3) != (other.output > 0.3)))
        return f"max abs diff {diff:.2e}, {flips} pixels change side of thresh 0.3"
    same = bool(np.array_equal(baseline.output.argmax(-1), other.output.argmax(-1)))
    return f"argmax {'identical' if same else 'DIFFERENT'}, max abs diff {diff:.2e}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmups", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)

    version = paddle_version()
    variants = variants_for(version)
    table: dict[str, dict[Shape, Timing]] = {v.label: {} for v in variants}
    kinds: dict[Shape, ModelKind] = {}
    plan: tuple[tuple[ModelKind, tuple[Shape, ...]], ...] = (
        ("det", DET_SHAPES),
        ("rec", REC_SHAPES),
    )
    load_before = os.getloadavg()[0]
    for kind, shapes in plan:
        measured = measure(kind, shapes, variants, args.threads, args.warmups, args.repeats)
        for label, cells in measured.items():
            table[label].update(cells)
        for shape in shapes:
            kinds[shape] = kind
    load_after = os.getloadavg()[0]

    print(
        f"1-min load average before {load_before:.2f}, after {load_after:.2f}; "
        f"paddlepaddle {version}, cpu_threads={args.threads}, "
        f"{args.warmups} warm-ups, median (min) of {args.repeats} runs, ms\n"
    )
    print("| input | " + " | ".join(v.label for v in variants) + " |")
    print("|---|" + "---|" * len(variants))
    for shape, kind in kinds.items():
        label = f"{kind} {'x'.join(map(str, shape))}"
        row = " | ".join(_cell(table[v.label][shape]) for v in variants)
        print(f"| {label} | {row} |")

    baseline_label = variants[0].label
    print(f"\nOutputs against {baseline_label} (same inputs):\n")
    for variant in variants[1:]:
        for shape, kind in kinds.items():
            agreement = _agreement(kind, table[baseline_label][shape], table[variant.label][shape])
            print(f"- {variant.label}, {kind} {'x'.join(map(str, shape))}: {agreement}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
