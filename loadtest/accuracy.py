"""Accuracy harness: character error rate (CER) of an OCR function against ground-truth text.

Text is normalised before comparison (see ``normalize_text``), so CER measures the characters,
not the layout: OCR returns one string per detected line, in its own order and spacing, while a
PDF's text layer has its own line breaks and spaces.

Run the baseline from the repository root (the default OCR is PaddleOCR's own pipeline on the
embedded models, from tests/reference.py)::

    PYTHONPATH=. python -m loadtest.accuracy --pages 10 --dpi 150
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.text_scores import CJK_CHARS, char_edits, merged_words, normalize_text
from serving.convert import pdf_pages

__all__ = [
    "AccuracyReport",
    "PageAccuracy",
    "WordCounts",
    "cer",
    "char_edits",
    "evaluate",
    "merged_words",
    "normalize_text",
    "pages_cer",
    "word_counts",
    "words",
]

OcrFn = Callable[[np.ndarray], list[str]]

_WORD = re.compile(f"[{CJK_CHARS}]|[^\\W_{CJK_CHARS}]+")
"""A CJK character (kana, ideographs), or a run of other letters and digits."""


def words(text: str) -> list[str]:
    """The words of `text` for word-level F1: after NFKC, runs of letters and digits, each CJK
    character a word of its own (Chinese is written without spaces). Punctuation is not a word,
    so "manip-ulation" is "manip" and "ulation" however the line breaks fall; case counts."""
    return _WORD.findall(unicodedata.normalize("NFKC", text))


@dataclass(frozen=True, slots=True)
class WordCounts:
    """Words matched between a reference and a hypothesis, as multisets (order ignored)."""

    matched: int
    reference: int
    hypothesis: int

    def __add__(self, other: WordCounts) -> WordCounts:
        return WordCounts(
            self.matched + other.matched,
            self.reference + other.reference,
            self.hypothesis + other.hypothesis,
        )

    @property
    def precision(self) -> float:
        """Matched / hypothesis words (1.0 when the hypothesis has none)."""
        return self.matched / self.hypothesis if self.hypothesis else 1.0

    @property
    def recall(self) -> float:
        """Matched / reference words (1.0 when the reference has none)."""
        return self.matched / self.reference if self.reference else 1.0

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall (0.0 when both are 0)."""
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0


def word_counts(reference: str, hypothesis: str) -> WordCounts:
    """Bag-of-words match of two texts (`words`); sum them over pages for a micro F1."""
    ref, hyp = Counter(words(reference)), Counter(words(hypothesis))
    return WordCounts(sum((ref & hyp).values()), sum(ref.values()), sum(hyp.values()))


def pages_cer(truths: dict[str, str], texts: dict[str, list[str]]) -> float:
    """Character error rate of all pages together: each page's text layer (`truths`) against
    its recognised lines (`texts`, joined by newlines); 0.0 where there are no characters."""
    edits = chars = 0
    for name, truth in truths.items():
        e, n = char_edits(truth, "\n".join(texts[name]))
        edits += e
        chars += n
    return edits / chars if chars else 0.0


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate: edits (insertions, deletions, substitutions) / reference characters.

    Both texts go through ``normalize_text`` first. CER can exceed 1.0 when the hypothesis is much
    longer than the reference. An empty reference gives 0.0 against an empty hypothesis and 1.0
    against any other.
    """
    edits, n_ref = char_edits(reference, hypothesis)
    if n_ref == 0:
        return 0.0 if edits == 0 else 1.0
    return edits / n_ref


@dataclass(frozen=True, slots=True, kw_only=True)
class PageAccuracy:
    """CER of one page."""

    label: str
    edits: int
    reference_chars: int
    ocr_s: float
    """Wall-clock seconds the OCR function took on this page (``time.monotonic``)."""
    hypothesis: str
    """The OCR lines joined with newlines, before normalisation."""
    words: WordCounts = WordCounts(0, 0, 0)
    """Word-level match against the reference (`word_counts`)."""

    @property
    def cer(self) -> float:
        """Edits / reference characters, 0.0 or 1.0 for an empty reference (as ``cer``)."""
        if self.reference_chars == 0:
            return 0.0 if self.edits == 0 else 1.0
        return self.edits / self.reference_chars


@dataclass(frozen=True, slots=True, kw_only=True)
class AccuracyReport:
    """Per-page results and their aggregate."""

    pages: tuple[PageAccuracy, ...]

    @property
    def total_edits(self) -> int:
        """Edits summed over all pages."""
        return sum(p.edits for p in self.pages)

    @property
    def total_reference_chars(self) -> int:
        """Reference characters summed over all pages."""
        return sum(p.reference_chars for p in self.pages)

    @property
    def cer(self) -> float:
        """Aggregate CER: total edits / total reference characters (long pages weigh more)."""
        if self.total_reference_chars == 0:
            return 0.0 if self.total_edits == 0 else 1.0
        return self.total_edits / self.total_reference_chars

    @property
    def words(self) -> WordCounts:
        """Word matches summed over all pages."""
        return sum((p.words for p in self.pages), WordCounts(0, 0, 0))

    @property
    def word_f1(self) -> float:
        """Micro-averaged word-level F1 over all pages."""
        return self.words.f1

    @property
    def mean_ocr_s(self) -> float:
        """Mean seconds per page spent in the OCR function."""
        return sum(p.ocr_s for p in self.pages) / len(self.pages) if self.pages else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable summary with every page."""
        return {
            "cer": self.cer,
            "word_f1": self.word_f1,
            "total_edits": self.total_edits,
            "total_reference_chars": self.total_reference_chars,
            "mean_ocr_s": self.mean_ocr_s,
            "pages": [{**asdict(p), "cer": p.cer} for p in self.pages],
        }


def evaluate(
    pages: Sequence[tuple[np.ndarray, str]],
    ocr: OcrFn,
    *,
    labels: Sequence[str] | None = None,
) -> AccuracyReport:
    """Run ``ocr`` on every (image, ground truth) pair and measure CER.

    Args:
        pages: BGR uint8 images with their ground-truth text.
        ocr: Returns the recognised lines of one image; they are joined before comparison.
        labels: Names for the pages in the report; defaults to "page0", "page1", ...
    """
    if labels is not None and len(labels) != len(pages):
        raise ValueError(f"{len(labels)} labels for {len(pages)} pages")
    results: list[PageAccuracy] = []
    for i, (image, truth) in enumerate(pages):
        started = time.monotonic()
        lines = ocr(image)
        ocr_s = time.monotonic() - started
        hypothesis = "\n".join(lines)
        edits, n_ref = char_edits(truth, hypothesis)
        label = labels[i] if labels is not None else f"page{i}"
        results.append(
            PageAccuracy(
                label=label,
                edits=edits,
                reference_chars=n_ref,
                ocr_s=ocr_s,
                hypothesis=hypothesis,
                words=word_counts(truth, hypothesis),
            )
        )
    return AccuracyReport(pages=tuple(results))


def _load_ocr(spec: str) -> OcrFn:
    """Import "module:function"; it may return the lines or a dict with "rec_texts"."""
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"--ocr must look like 'module:function', got {spec!r}")
    fn = getattr(importlib.import_module(module_name), attr)

    def ocr(image: np.ndarray) -> list[str]:
        out = fn(image)
        texts = out["rec_texts"] if isinstance(out, Mapping) else out
        return [str(t) for t in texts]

    return ocr


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: render text pages of real PDFs, OCR them, print per-page and aggregate CER."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.accuracy", description=main.__doc__)
    parser.add_argument("--pages", type=int, default=10, help="pages in all, spread over PDFs")
    parser.add_argument("--dpi", type=float, default=150.0)
    parser.add_argument("--pdf", type=Path, action="append", help="default: the Debian doc PDFs")
    parser.add_argument("--ocr", default="tests.reference:reference_ocr", help="module:function")
    parser.add_argument("--json", type=Path, help="also write the full report here")
    args = parser.parse_args(argv)

    pdfs: list[Path] = args.pdf or pdf_pages.find_real_pdfs()
    if not pdfs:
        print("no PDFs found; run scripts/system-deps.sh", file=sys.stderr)
        return 2
    samples: list[tuple[np.ndarray, str]] = []
    labels: list[str] = []
    for pdf, n in zip(pdfs, pdf_pages.spread(args.pages, len(pdfs)), strict=True):
        for picked in pdf_pages.text_pages(pdf, n, dpi=args.dpi):
            samples.append((picked.image, picked.text))
            labels.append(picked.label)
    report = evaluate(samples, _load_ocr(args.ocr), labels=labels)

    for page in report.pages:
        print(
            f"{page.label:40s} cer={page.cer:.4f} word_f1={page.words.f1:.4f} "
            f"edits={page.edits:5d} "
            f"chars={page.reference_chars:5d} ocr_s={page.ocr_s:.2f}"
        )
    print(
        f"TOTAL pages={len(report.pages)} dpi={args.dpi:g} cer={report.cer:.4f} "
        f"word_f1={report.word_f1:.4f} "
        f"edits={report.total_edits} chars={report.total_reference_chars} "
        f"mean_ocr_s={report.mean_ocr_s:.2f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_dict(), ensure_ascii=False, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
