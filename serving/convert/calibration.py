"""The int8 models' calibration set: real document pages that no bench or test reads.

NNCF sets each int8 model's quantisation ranges from inputs it has seen (`models.quantize`).
They are the inputs the served pipeline gives each model: the pages of the Debian doc PDFs
(`serving.convert.pdf_pages.REAL_PDFS`), rendered at the bench's 150 dpi and read by the configured
models at f32 on OpenVINO, with each model's batches recorded as they run (the detector's pages, the
recogniser's line batches, the classifier's where one is configured).

The pages are held out from every measurement: `make bench`, `loadtest.accuracy` and the tests
pick their pages with `select_text_pages(pdf, n)`, and no pick for n = 1 .. `HELD_OUT_UP_TO`
per PDF is a calibration page, so the CER the bench reports for int8 is not measured on pages
it was calibrated on. shared-mime-info's 17 text pages are all picked by some n, so the set is
English (libtasn1, maint-guide) and Chinese (maint-guide-zh-cn) pages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from serving.config import AppConfig
from serving.convert import pdf_pages
from serving.engine.local import LocalEngine

HELD_OUT_UP_TO = 10
"""Pages per PDF up to which the bench's and tests' picks are kept out of calibration."""
PAGES_PER_PDF = 4
"""Calibration pages from each PDF (fewer where fewer are held out)."""
CALIBRATION_DPI = 150.0
"""The bench's render resolution."""


@dataclass(frozen=True, slots=True)
class CalibrationPage:
    """One calibration page: where it comes from, and its pixels (BGR)."""

    pdf: Path
    index: int
    image: np.ndarray

    @property
    def label(self) -> str:
        """`<pdf name>:p<page number>`, for the provenance."""
        return f"{self.pdf.name}:p{self.index + 1}"


def held_out_pages(pdf: Path, count: int) -> list[int]:
    """Up to `count` text pages of `pdf` that `select_text_pages(pdf, n)` picks for no n up to
    `HELD_OUT_UP_TO`, spread over the document."""
    picked: set[int] = set()
    for n in range(1, HELD_OUT_UP_TO + 1):
        picked.update(pdf_pages.select_text_pages(pdf, n))
    rest = [i for i in pdf_pages.select_text_pages(pdf, 10**6) if i not in picked]
    if count >= len(rest):
        return rest
    return [rest[(2 * k + 1) * len(rest) // (2 * count)] for k in range(count)]


def calibration_pages(per_pdf: int = PAGES_PER_PDF) -> list[CalibrationPage]:
    """The calibration pages of the real PDFs found on this machine.

    Raises:
        RuntimeError: none of the PDFs is installed (scripts/system-deps.sh installs them).
    """
    pdfs = pdf_pages.find_real_pdfs()
    if not pdfs:
        raise RuntimeError("no real PDFs found for int8 calibration; run scripts/system-deps.sh")
    chosen = []
    for pdf in pdfs:
        for index in held_out_pages(pdf, per_pdf):
            (image,) = pdf_pages.render_pdf_pages(pdf, dpi=CALIBRATION_DPI, first=index, count=1)
            chosen.append(CalibrationPage(pdf, index, image))
    return chosen


def calibration_inputs(
    config: AppConfig, pages: list[CalibrationPage]
) -> dict[str, list[np.ndarray]]:
    """Each model stage's input batches (stage -> batches) as the f32 pipeline reads `pages`
    with the configured models on OpenVINO."""
    engine_config = dataclasses.replace(
        config.engine, cpu_backend="openvino", openvino_precision="f32"
    )
    engine = LocalEngine(dataclasses.replace(config, engine=engine_config))
    engine.load()
    recorded: dict[str, list[np.ndarray]] = {stage: [] for stage in engine.predictors}
    for stage, predictor in engine.predictors.items():
        predictor.run = _recording(predictor.run, recorded[stage])  # type: ignore[method-assign,assignment]
    for page in pages:
        engine.ocr(page.image)
    return recorded


def _recording(
    run: Callable[[np.ndarray], Any], into: list[np.ndarray]
) -> Callable[[np.ndarray], Any]:
    def record(batch: np.ndarray) -> Any:
        into.append(np.ascontiguousarray(batch, dtype=np.float32).copy())
        return run(batch)

    return record


def describe(pages: list[CalibrationPage]) -> dict[str, Any]:
    """The calibration set, for the int8 models' provenance."""
    return {
        "source": "Debian doc PDFs (serving.convert.pdf_pages.REAL_PDFS), text pages held out from "
        f"the bench's and tests' picks (select_text_pages n <= {HELD_OUT_UP_TO} per PDF)",
        "dpi": CALIBRATION_DPI,
        "pages": [page.label for page in pages],
        "page_count": len(pages),
    }
