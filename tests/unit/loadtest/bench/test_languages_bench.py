"""The turned-page and language check's summary (loadtest/bench/languages.py), from a report
written here: the verdict against the 0.5-point bound, each language's CER for every set that
reads it, best first, with the one `lang` picks marked, the same as `models.langs.MEASURED_CER`'s
entries, a missing Debian PDF named. The check on real models: `ocr-bench
languages`."""

from __future__ import annotations

import pytest

from loadtest.bench.languages import LANGUAGE_PDFS, markdown_lines, table_lines
from models.langs import V5_MOBILE, V6_SMALL

pytestmark = pytest.mark.unit


def _report(turned_270: float) -> dict:
    return {
        "turned": {"pages": ["a", "b"], "0": 0.0128, "90": 0.0128, "180": 0.013, "270": turned_270},
        "languages": {
            "en": {
                "pages": [20, 50],
                "cer": {"PP-OCRv5_mobile": 0.0062, "PP-OCRv6_small": 0.0048},
                "models": {"PP-OCRv5_mobile": V5_MOBILE, "PP-OCRv6_small": V6_SMALL},
                "picked": "PP-OCRv6_small",
            },
            "japan": {"missing": str(LANGUAGE_PDFS["japan"])},
        },
    }


def test_the_summary_says_each_angle_each_language_and_the_verdict() -> None:
    lines = markdown_lines(_report(0.0170))
    assert lines[0] == (
        "- Turned pages (2 bench pages, page orientation auto): CER upright 1.28%, turned 90 "
        "1.28%, 180 1.30%, 270 1.70%: within 0.5 points of upright"
    )
    assert lines[1] == (
        "- lang=en (maint-guide.en.pdf p20, p50): CER PP-OCRv6_small 0.48% (picked), "
        "PP-OCRv5_mobile 0.62%"
    )
    assert lines[2].startswith("- lang=japan: no /usr/share/doc/maint-guide-ja/maint-guide.ja.pdf")


def test_a_turned_page_past_the_bound_is_not_within() -> None:
    assert "NOT within 0.5 points" in markdown_lines(_report(0.0180))[0]


def test_the_table_lines_are_the_servers_ranking_entries() -> None:
    assert table_lines(_report(0.0170)) == [
        f"    'en': {{{V5_MOBILE!r}: 0.62, {V6_SMALL!r}: 0.48}},"
    ]
