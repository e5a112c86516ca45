"""`ocr-batch`'s one plan (serving/batch/plan.py), on real files: what every driver is given to do.

The drivers themselves run it end to end in tests/e2e/test_batch_cli.py (in process, --server)
and tests/e2e/test_batch_ray.py (--ray).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from serving.batch.manifest import MANIFEST, Manifest
from serving.batch.plan import BatchError, open_plan
from tests import images

OPTIONS = {"det_thresh": 0.2}


def _page() -> np.ndarray:
    return np.full((40, 60, 3), 255, dtype=np.uint8)


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """A folder: a 2-page PDF, an image, the same image again under another name, a non-document."""
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.pdf").write_bytes(images.make_pdf([_page(), _page()], dpi=72.0))
    png = images.encode_png(_page())
    (folder / "b.png").write_bytes(png)
    (folder / "sub" / "copy.png").write_bytes(png)
    (folder / "c.png").write_bytes(b"not an image")
    return folder


def test_a_file_named_twice_is_done_once_in_input_order(inputs: Path, tmp_path: Path) -> None:
    said: list[str] = []
    plan, manifest = open_plan([str(inputs)], tmp_path / "out", OPTIONS, said.append)
    manifest.close()
    assert [d.name for d in plan.documents] == ["a.pdf", "b.png", "sub/copy.png"]
    assert plan.pages == 3  # copy.png is b.png's bytes: one page, not two
    assert [(doc.name, page) for doc, page in plan.todo] == [
        ("a.pdf", 0),
        ("a.pdf", 1),
        ("b.png", 0),
    ]
    assert plan.problems == ["c.png: neither a PDF nor a supported image; skipped"]
    assert said == [*plan.problems, "3 documents, 3 pages: 3 to do, 0 skipped (already done)"]


def test_pages_in_the_manifest_with_the_same_options_are_skipped(
    inputs: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first, manifest = open_plan([str(inputs)], out, OPTIONS, lambda _: None)
    doc, page = first.todo[1]
    manifest.append((doc.sha256, page), {"file": doc.name, "page": page})
    manifest.close()

    again, manifest = open_plan([str(inputs)], out, OPTIONS, lambda _: None)
    manifest.close()
    assert (again.pages, again.skipped) == (3, 1)
    assert [(d.name, p) for d, p in again.todo] == [("a.pdf", 0), ("b.png", 0)]
    other, manifest = open_plan([str(inputs)], out, {"det_thresh": 0.3}, lambda _: None)
    manifest.close()
    assert other.skipped == 0  # done with other options is not done


def test_problems_go_to_warn_and_the_plan_line_to_say(inputs: Path, tmp_path: Path) -> None:
    said: list[str] = []
    warned: list[str] = []
    _, manifest = open_plan([str(inputs)], tmp_path / "out", OPTIONS, said.append, warned.append)
    manifest.close()
    assert warned == ["c.png: neither a PDF nor a supported image; skipped"]
    assert said == ["3 documents, 3 pages: 3 to do, 0 skipped (already done)"]


def test_no_document_stops_the_run_before_the_output_folder_is_made(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("words")
    out = tmp_path / "out"
    with pytest.raises(BatchError, match="no document to OCR"):
        open_plan([str(tmp_path / "notes.txt")], out, OPTIONS, lambda _: None)
    assert not out.exists()


def test_an_input_that_names_nothing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"missing/\*\.png: no such file"):
        open_plan([str(tmp_path / "missing/*.png")], tmp_path / "out", OPTIONS, lambda _: None)


def test_the_manifest_it_returns_is_read_and_appends_to_the_folder(
    inputs: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    plan, manifest = open_plan([str(inputs)], out, OPTIONS, lambda _: None)
    doc, page = plan.todo[0]
    manifest.append((doc.sha256, page), {"file": doc.name, "page": page})
    manifest.close()
    reread = Manifest(out, OPTIONS)
    reread.load()
    assert reread.done((doc.sha256, page))
    assert (out / MANIFEST).exists()
