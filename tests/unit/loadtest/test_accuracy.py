"""Unit tests for the accuracy harness: CER (loadtest/accuracy.py) and the real pages
(serving/convert/pdf_pages.py)."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from loadtest import accuracy
from loadtest.accuracy import (
    WordCounts,
    cer,
    char_edits,
    evaluate,
    normalize_text,
    word_counts,
    words,
)
from serving.convert import pdf_pages as pages
from tests import images

needs_real_pdfs = pytest.mark.skipif(
    not pages.find_real_pdfs(), reason="no Debian doc PDFs; run scripts/system-deps.sh"
)


# -- normalisation and CER, each value worked out by hand -------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello world", "helloworld"),
        ("a\r\n b\t\u00a0c\u3000d", "abcd"),  # CRLF, tab, no-break and ideographic spaces
        ("\ufb01nal \ufb02ow", "finalflow"),  # fi and fl ligatures
        ("价格，１２８元：", "价格,128元:"),  # full-width digits and punctuation
        ("x\u2074", "x4"),  # superscript digit
        ("it\u2019s \u2013", "it\u2019s\u2013"),  # typographic quote and dash are kept
        ("a\x00b\x1fc", "abc"),  # control characters dropped
    ],
)
def test_normalize_text(text: str, expected: str) -> None:
    assert normalize_text(text) == expected


@pytest.mark.parametrize(
    ("reference", "hypothesis", "expected"),
    [
        ("kitten", "sitting", 3 / 6),  # k->s, e->i, +g
        ("abcd", "abcd", 0.0),
        ("abcd", "abc", 1 / 4),  # one deletion
        ("abcd", "abxd", 1 / 4),  # one substitution
        ("abcd", "abcde", 1 / 4),  # one insertion
        ("ab", "abcdef", 4 / 2),  # insertions can push CER above 1
        ("abcd", "", 1.0),
        ("hello world", "hello\nworld", 0.0),  # line breaks do not count
        ("The quick fox", "Thequickfox", 0.0),  # nor spaces
        ("Hello", "hello", 1 / 5),  # case does
        ("今天天气很好", "今天天汽很好", 1 / 6),
        ("价格，128元", "价格,128元", 0.0),
        ("\ufb01le", "file", 0.0),
        ("", "", 0.0),
        ("", "x", 1.0),
        (" \n ", "", 0.0),  # whitespace-only reference is empty after normalisation
    ],
)
def test_cer_hand_checked(reference: str, hypothesis: str, expected: float) -> None:
    assert cer(reference, hypothesis) == pytest.approx(expected)


def test_char_edits_counts_normalised_reference() -> None:
    assert char_edits("a b\nc", "abd") == (1, 3)


def test_cer_is_symmetric_in_edits_not_in_length() -> None:
    assert char_edits("abc", "abcdef")[0] == char_edits("abcdef", "abc")[0] == 3
    assert cer("abc", "abcdef") == 1.0
    assert cer("abcdef", "abc") == 0.5


# -- evaluate --------------------------------------------------------------------------------


def _scripted_ocr(outputs: list[list[str]]) -> accuracy.OcrFn:
    it: Iterator[list[str]] = iter(outputs)

    def ocr(image: np.ndarray) -> list[str]:
        assert image.dtype == np.uint8
        return next(it)

    return ocr


def test_evaluate_per_page_and_aggregate() -> None:
    blank = images.empty_page(64, 64)
    samples = [(blank, "abc def\nghi"), (blank, "xyz"), (blank, "")]
    ocr = _scripted_ocr([["abc", "def ghi"], ["xy"], []])
    report = evaluate(samples, ocr, labels=["one", "two", "three"])

    assert [p.label for p in report.pages] == ["one", "two", "three"]
    assert [p.edits for p in report.pages] == [0, 1, 0]
    assert [p.reference_chars for p in report.pages] == [9, 3, 0]
    assert [p.cer for p in report.pages] == pytest.approx([0.0, 1 / 3, 0.0])
    assert report.pages[0].hypothesis == "abc\ndef ghi"
    # Aggregate is total edits / total chars (1/12), not the mean of page CERs (1/9).
    assert report.cer == pytest.approx(1 / 12)
    assert report.total_edits == 1
    assert report.total_reference_chars == 12
    assert all(p.ocr_s >= 0 for p in report.pages)
    summary = json.loads(json.dumps(report.to_dict()))
    assert summary["cer"] == pytest.approx(1 / 12)
    assert summary["pages"][1]["cer"] == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("manip-\r\nulation, of\tthe \ufb01le.", ["manip", "ulation", "of", "the", "file"]),
        ("价格，１２８元：OK", ["价", "格", "128", "元", "OK"]),  # CJK characters one by one
        ("snake_case x2 -- ...", ["snake", "case", "x2"]),
        ("", []),
    ],
)
def test_words(text: str, expected: list[str]) -> None:
    assert words(text) == expected


def test_word_f1_hand_checked() -> None:
    counts = word_counts("the cat saw the dog", "the cat the cat")
    # Reference {the: 2, cat, saw, dog}; hypothesis {the: 2, cat: 2}; matched the x2 + cat = 3.
    assert counts == WordCounts(3, 5, 4)
    assert counts.precision == pytest.approx(3 / 4)
    assert counts.recall == pytest.approx(3 / 5)
    assert counts.f1 == pytest.approx(2 * 0.75 * 0.6 / 1.35)
    assert word_counts("a b", "").f1 == 0.0
    assert word_counts("", "").f1 == 1.0


def test_evaluate_reports_micro_word_f1() -> None:
    blank = images.empty_page(8, 8)
    report = evaluate([(blank, "a b c d"), (blank, "e")], _scripted_ocr([["a b c d"], ["x"]]))
    # Pages' F1 are 1.0 and 0.0; summed counts give 4 of 5 words each way.
    assert report.words == WordCounts(4, 5, 5)
    assert report.word_f1 == pytest.approx(0.8)
    assert report.to_dict()["word_f1"] == pytest.approx(0.8)


def test_evaluate_default_labels_and_empty_input() -> None:
    blank = images.empty_page(8, 8)
    report = evaluate([(blank, "a")], _scripted_ocr([["b"]]))
    assert report.pages[0].label == "page0"
    assert report.cer == 1.0
    empty = evaluate([], _scripted_ocr([]))
    assert empty.cer == 0.0
    assert empty.mean_ocr_s == 0.0


def test_evaluate_rejects_label_count_mismatch() -> None:
    with pytest.raises(ValueError, match="labels"):
        evaluate([(images.empty_page(8, 8), "a")], _scripted_ocr([]), labels=[])


# -- pages: rendering synthetic PDFs ---------------------------------------------------------


def _two_colour_page() -> np.ndarray:
    img = np.full((300, 400, 3), 255, dtype=np.uint8)
    img[50:250, 20:180] = (255, 0, 0)  # blue in BGR
    img[50:250, 220:380] = (0, 0, 255)  # red in BGR
    return img


def test_render_pdf_pages_returns_bgr_at_dpi() -> None:
    src = _two_colour_page()
    pdf = images.make_pdf([src, images.empty_page(200, 100)], dpi=150)
    rendered = pages.render_pdf_pages(pdf, dpi=150)
    assert len(rendered) == 2
    page = rendered[0]
    assert page.dtype == np.uint8
    assert page.flags.c_contiguous
    assert abs(page.shape[0] - 300) <= 1
    assert abs(page.shape[1] - 400) <= 1
    assert page.shape[2] == 3
    # Channel order: blue stays in channel 0, red in channel 2 (JPEG inside the PDF, so approx).
    assert np.abs(page[150, 100].astype(int) - (255, 0, 0)).max() < 30
    assert np.abs(page[150, 300].astype(int) - (0, 0, 255)).max() < 30
    assert (rendered[1] > 240).all()
    half = pages.render_pdf_pages(pdf, dpi=75, first=1, count=1)
    assert len(half) == 1
    assert abs(half[0].shape[1] - 100) <= 1


def test_render_pdf_pages_range_checks(tmp_path: Path) -> None:
    path = tmp_path / "two.pdf"
    path.write_bytes(images.make_pdf([images.empty_page(50, 50)] * 2))
    assert pages.pdf_page_count(path) == 2
    assert pages.render_pdf_pages(path, first=2) == []
    with pytest.raises(IndexError):
        pages.render_pdf_pages(path, first=1, count=2)
    with pytest.raises(IndexError):
        pages.render_pdf_pages(path, first=-1)
    with pytest.raises(ValueError, match="dpi"):
        pages.render_pdf_pages(path, dpi=0)
    with pytest.raises(IndexError):
        pages.pdf_page_text(path, 2)


def test_image_only_pdf_has_no_text_pages() -> None:
    pdf = images.make_pdf([images.latin_lines().image])
    assert pages.pdf_page_text(pdf, 0) == ""
    assert pages.select_text_pages(pdf, 3) == []


# -- pages: the real Debian doc PDFs ---------------------------------------------------------


def _letters_and_digits(text: str) -> int:
    return sum(1 for ch in text if unicodedata.category(ch)[0] in "LN")


@needs_real_pdfs
def test_find_real_pdfs_returns_existing_known_paths() -> None:
    found = pages.find_real_pdfs()
    assert all(path in pages.REAL_PDFS and path.is_file() for path in found)


@needs_real_pdfs
@pytest.mark.parametrize("pdf", pages.find_real_pdfs(), ids=lambda p: p.name)
def test_select_text_pages_picks_spread_text_pages(pdf: Path) -> None:
    picked = pages.select_text_pages(pdf, 4)
    assert len(picked) == 4
    assert picked == sorted(set(picked))
    assert picked[-1] - picked[0] >= pages.pdf_page_count(pdf) // 3  # spread, not clustered
    for index in picked:
        text = pages.pdf_page_text(pdf, index)
        assert _letters_and_digits(text) >= 200
        assert "\ufffe" not in text
    assert pages.select_text_pages(pdf, 0) == []


@needs_real_pdfs
def test_text_pages_are_the_picked_pages_rendered_with_their_text() -> None:
    pdf = pages.find_real_pdfs()[1]
    picked = pages.text_pages(pdf, 2, dpi=75)
    assert [page.index for page in picked] == pages.select_text_pages(pdf, 2)
    for page in picked:
        (image,) = pages.render_pdf_pages(pdf, dpi=75, first=page.index, count=1)
        assert np.array_equal(page.image, image)
        assert page.text == pages.pdf_page_text(pdf, page.index)
        assert page.label == f"shared-mime-info-spec-p{page.index + 1}"


def test_spread_splits_evenly_the_first_buckets_one_more() -> None:
    assert pages.spread(7, 3) == [3, 2, 2]
    assert pages.spread(2, 4) == [1, 1, 0, 0]
    assert sum(pages.spread(24, 5)) == 24


@needs_real_pdfs
def test_real_page_renders_and_text_matches_bytes_input() -> None:
    pdf = pages.find_real_pdfs()[0]
    (image,) = pages.render_pdf_pages(pdf, dpi=150, first=3, count=1)
    assert image.dtype == np.uint8
    assert image.shape[2] == 3
    assert 1000 < max(image.shape[:2]) < 2000  # A4 or Letter at 150 dpi
    ink = (image < 128).any(axis=2).mean()
    assert 0.005 < ink < 0.3
    assert pages.pdf_page_text(pdf, 3) == pages.pdf_page_text(pdf.read_bytes(), 3)


@needs_real_pdfs
def test_cli_with_scripted_ocr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    pdf = str(pages.find_real_pdfs()[0])
    rc = accuracy.main(
        ["--pages", "2", "--pdf", pdf, "--ocr", f"{__name__}:no_text_ocr", "--json", str(out)]
    )
    assert rc == 0
    report = json.loads(out.read_text())
    assert len(report["pages"]) == 2
    assert report["cer"] == 1.0  # nothing recognised: every reference character is a deletion
    assert "TOTAL pages=2" in capsys.readouterr().out


def no_text_ocr(image: np.ndarray) -> dict[str, list[str]]:
    """An OCR stand-in for the CLI test, returning a reference_ocr-shaped dict."""
    return {"rec_texts": []}


def test_merged_words_counts_the_spaces_the_reading_lost() -> None:
    truth = "Invoice 2024-0137\nTotal amount: 482.50 EUR"
    assert accuracy.merged_words(truth, "Invoice 2024-0137 Total amount: 482.50 EUR") == 0
    assert accuracy.merged_words(truth, "Invoice 2024-0137\nTotalamount: 482.50 EUR") == 1
    # The space after "amount:" is beside punctuation: not a word boundary (below).
    assert accuracy.merged_words(truth, "Invoice2024-0137 Totalamount:482.50 EUR") == 2
    # A space read as a character is a merge too; a misread letter or an extra space is not.
    assert accuracy.merged_words(truth, "Invoice 2024-0137 Total-amount: 482.50 EUR") == 1
    assert accuracy.merged_words(truth, "Invoice 2O24-0137 Total  amount : 482.50 EUR") == 0
    # A space beside punctuation is spacing, not two words read as one.
    assert accuracy.merged_words("parser2array (const char", "parser2array(const char") == 0
    assert accuracy.merged_words("... describe it", "...describe it") == 0
