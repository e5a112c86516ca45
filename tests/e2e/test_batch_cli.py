"""`ocr-batch` in-process on a folder of images and a multi-page PDF; reruns do no work twice;
every `--format` is read back by a real consumer (pdftotext, an XML parser)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lxml import etree

from loadtest.accuracy import cer
from tests import images

CONFIG = """
[workers]
devices = ["cpu"]
# One CPU worker and one device worker (the CPU's default is two): what is tested is the folder
# walk, the reruns and the formats, not how many pages run at once; each run that OCRs starts two
# processes fewer, one of them loading and warming the models (2026-12-07).
cpu_workers = 1
cpu_instances = 1
[models]
# The default det and rec alone: they read every page here, and each run loads its models.
sets = {}
ori = ""
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    command = [sys.executable, "-m", "serving.batch.cli", *args, "--config", str(config)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)


def test_folder_to_jsonl_then_reruns_skip_what_is_done(tmp_path: Path) -> None:
    latin, chinese = images.latin_lines(), images.chinese_lines()
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    (folder / "doc.pdf").write_bytes(images.make_pdf([latin.image, chinese.image], dpi=144.0))
    (folder / "latin.png").write_bytes(images.encode_png(latin.image))
    (folder / "sub" / "chinese.png").write_bytes(images.encode_png(chinese.image))
    (folder / "notes.md").write_text("not a document: a folder walk leaves it out")
    out = tmp_path / "out"

    first = _run(tmp_path, str(folder), "--out", str(out))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "3 documents, 4 pages: 4 to do, 0 skipped" in first.stdout
    assert "4 pages done now" in first.stdout
    assert "page/s" in first.stderr  # the progress bar
    records = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["file"], r["page"]) for r in records] == [
        ("doc.pdf", 0),
        ("doc.pdf", 1),
        ("latin.png", 0),
        ("sub/chinese.png", 0),
    ]
    texts = [[line["text"] for line in r["lines"]] for r in records]
    assert texts[2] == latin.lines
    assert texts[3] == chinese.lines
    # PIL stores PDF pages as JPEG: the text must survive, spaces and a few strokes may not.
    truth = "".join(latin.lines + chinese.lines)
    assert cer(truth, "".join(texts[0] + texts[1])) < 0.05
    assert all(len(r["sha256"]) == 64 for r in records)
    manifest = (out / "manifest.jsonl").read_text().splitlines()
    assert len(manifest) == 4

    results_before = (out / "results.jsonl").stat().st_mtime_ns
    rerun = _run(tmp_path, str(folder), "--out", str(out))
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "4 to do" not in rerun.stdout
    assert "0 to do, 4 skipped (already done)" in rerun.stdout
    assert "0 pages done now" in rerun.stdout
    assert "outputs unchanged" in rerun.stdout
    assert (out / "results.jsonl").stat().st_mtime_ns == results_before
    assert (out / "manifest.jsonl").read_text().splitlines() == manifest

    # A new file: only its page runs; text files come from what the manifest holds.
    (folder / "more.png").write_bytes(images.encode_png(latin.image[:, ::-1].copy()))
    third = _run(tmp_path, str(folder), "--out", str(out), "--format", "txt")
    assert third.returncode == 0, third.stdout + third.stderr
    assert "4 documents, 5 pages: 1 to do, 4 skipped (already done)" in third.stdout
    assert len((out / "manifest.jsonl").read_text().splitlines()) == 5
    # In reading order, blocks apart by a blank line, pages by a form feed.
    assert _lines((out / "latin.png.txt").read_text()) == latin.lines
    assert _lines((out / "sub" / "chinese.png.txt").read_text()) == chinese.lines
    assert len((out / "doc.pdf.txt").read_text().split("\f")) == 2

    # The document formats, made from the manifest alone (nothing to OCR), read back by poppler
    # and an XML parser; a rerun leaves them alone.
    for fmt in ("pdf", "hocr", "alto"):
        made = _run(tmp_path, str(folder), "--out", str(out), "--format", fmt)
        assert made.returncode == 0, made.stdout + made.stderr
        assert "0 to do, 5 skipped" in made.stdout
    pdf_pages = _pdftotext(out / "doc.pdf.pdf")
    assert len(pdf_pages) == 2
    # The text layer holds the recognised text (the PDF's page images are JPEGs: see above).
    assert cer("".join(texts[0]), pdf_pages[0]) < 0.01
    assert cer("".join(texts[1]), pdf_pages[1]) < 0.01
    (png_page,) = _pdftotext(out / "sub" / "chinese.png.pdf")
    assert cer("".join(chinese.lines), png_page) < 0.01
    hocr = etree.parse(str(out / "doc.pdf.hocr"), etree.HTMLParser())
    assert len(hocr.xpath("//*[contains(@class, 'ocr_page')]")) == 2
    alto = etree.parse(str(out / "latin.png.alto.xml"))
    height, width = latin.image.shape[:2]
    (alto_page,) = alto.xpath("//*[local-name()='Page']")
    assert (int(alto_page.get("WIDTH")), int(alto_page.get("HEIGHT"))) == (width, height)
    again = _run(tmp_path, str(folder), "--out", str(out), "--format", "pdf")
    assert "outputs unchanged" in again.stdout


def _lines(text: str) -> list[str]:
    return [line for line in text.split("\f")[0].splitlines() if line]


def _pdftotext(path: Path) -> list[str]:
    """Each page's text, as poppler reads it from the PDF."""
    text = subprocess.run(["pdftotext", str(path), "-"], capture_output=True, text=True, check=True)
    return text.stdout.split("\f")[:-1]  # each page ends with a form feed


def test_nothing_to_ocr_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = _run(tmp_path, str(tmp_path / "empty"), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "no document to OCR" in result.stderr
    missing = _run(tmp_path, str(tmp_path / "nope-*.pdf"), "--out", str(tmp_path / "out"))
    assert missing.returncode == 2
    assert "no such file" in missing.stderr


def test_the_classifier_asked_for_without_a_model_stops_before_any_page(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "page.png").write_bytes(images.encode_png(images.latin_lines().image))
    out = tmp_path / "out"
    result = _run(tmp_path, str(folder), "--out", str(out), "-o", "textline_orientation=true")
    assert result.returncode == 2
    assert "needs a classifier (models.cls)" in result.stderr
    assert not (out / "results.jsonl").exists()


def test_a_missing_conversion_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "page.png").write_bytes(images.encode_png(images.latin_lines().image))
    config = tmp_path / "config.toml"
    # PP-OCRv5 mobile, named: Paddle models, which the ONNX engines read only once converted
    # (the default, PP-OCRv6 small, ships as ONNX and needs no conversion).
    v5 = 'det = "embedded:PP-OCRv5_mobile_det"\nrec = "embedded:PP-OCRv5_mobile_rec"\n'
    config.write_text(CONFIG + v5 + '\n[engine]\ncpu_backend = "openvino"\n')
    env = {**os.environ, "OCR_ENGINE__ONNX_DIR": str(tmp_path / "no-conversions")}
    command = [sys.executable, "-m", "serving.batch.cli", str(folder), "--out", str(tmp_path / "o")]
    result = subprocess.run(
        [*command, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 2
    assert "make convert" in result.stderr
    assert "Traceback" not in result.stderr
