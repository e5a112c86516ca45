"""`ocr-bench batching` (`loadtest.bench.batching`): CER per language, the 0.1-point bound
that makes bucketed the GPU default, batch histograms from `/metrics` deltas, the Markdown."""

from __future__ import annotations

from loadtest.bench.batching import (
    ModeTexts,
    cer_by_language,
    histogram,
    language,
    markdown,
    within_bound,
)
from loadtest.server_metrics import parse_histograms, subtract

METRICS = """# TYPE ocr_batch_size histogram
ocr_batch_size_bucket{{device="cpu",le="1.0",stage="rec"}} {one}
ocr_batch_size_bucket{{device="cpu",le="6.0",stage="rec"}} {six}
ocr_batch_size_bucket{{device="cpu",le="96.0",stage="rec"}} {six}
ocr_batch_size_bucket{{device="cpu",le="+Inf",stage="rec"}} {six}
ocr_batch_size_count{{device="cpu",stage="rec"}} {six}
ocr_batch_size_sum{{device="cpu",stage="rec"}} 0
"""


def test_pages_are_grouped_by_their_pdfs_language() -> None:
    assert language("maint-guide.zh-cn-p19") == "zh"
    assert language("libtasn1-p11") == "en"


def test_cer_per_language_and_the_bound() -> None:
    truths = {"a-p1": "hello world", "maint-guide.zh-cn-p1": "你好世界"}
    exact = ModeTexts("exact", {"a-p1": ["hello world"], "maint-guide.zh-cn-p1": ["你好世界"]})
    close = ModeTexts("bucketed", {"a-p1": ["hello world"], "maint-guide.zh-cn-p1": ["你好世界"]})
    cers = cer_by_language(truths, [exact, close])
    assert cers == {"exact": {"en": 0.0, "zh": 0.0}, "bucketed": {"en": 0.0, "zh": 0.0}}
    assert within_bound(cers)
    worse = ModeTexts("bucketed", {"a-p1": ["hello world"], "maint-guide.zh-cn-p1": ["你好世"]})
    cers = cer_by_language(truths, [exact, worse])
    assert cers["bucketed"]["zh"] == 0.25
    assert not within_bound(cers)  # one language out of bound is enough
    assert "NOT within" in "\n".join(
        markdown({"cer": cers, "within_bound": False, "bound_points": 0.1})
    )


def test_histogram_counts_batches_per_bucket_between_scrapes() -> None:
    names = ("ocr_batch_size",)
    before = parse_histograms(METRICS.format(one=2, six=3), names)
    after = parse_histograms(METRICS.format(one=3, six=10), names)
    delta = subtract(after, before)
    assert histogram(delta, "ocr_batch_size", "rec") == {"1": 1, "6": 6}
    assert histogram(delta, "ocr_batch_size", "det") == {}
