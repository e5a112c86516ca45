"""The web page at `/` in headless Chromium (Debian's, driven by playwright): upload a rendered
image and a PDF, see a box per recognised line over the page and the text beside it, copy the
text, download the JSON and a searchable PDF."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest.accuracy import cer
from tests import images
from tests.e2e.conftest import Server
from tests.reading import assert_reads

CHROMIUM = Path("/usr/bin/chromium")
# Debian's Chromium, never playwright's own download (`playwright install` needs the network).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 180_000

sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (scripts/system-deps.sh installs it)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser, server: Server) -> Iterator[object]:
    context = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 1000})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    # The page runs under the server's Content-Security-Policy: anything it refused (an image,
    # a script, a fetch) shows here.
    refused: list[str] = []
    page.on(
        "console",
        lambda msg: refused.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    answer = page.goto(f"{server.url}/")
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    yield page
    context.close()
    assert not errors, errors
    assert not refused, refused


def _upload(page, path: Path) -> None:
    page.set_input_files("#file", str(path))
    page.wait_for_selector("#pages[data-state=done], #pages[data-state=error]")
    assert page.get_attribute("#pages", "data-state") == "done", page.text_content("#status")


def _images_loaded(page, count: int) -> None:
    """Wait until the page shows `count` page images, each decoded. Waited for with Playwright's
    own matchers: a predicate string polled by `wait_for_function` is eval'd in the page, which
    the server's Content-Security-Policy (no 'unsafe-eval') refuses once the first check fails."""
    images = page.locator(".page-image")
    sync_api.expect(images).to_have_count(count, timeout=TIMEOUT_MS)
    for index in range(count):
        sync_api.expect(images.nth(index)).to_have_js_property("complete", True, timeout=TIMEOUT_MS)


def _page_views(page) -> list[dict[str, object]]:
    return page.eval_on_selector_all(
        "article.page",
        """views => views.map(view => ({
            texts: [...view.querySelectorAll('.lines li .text')].map(li => li.textContent),
            boxes: view.querySelectorAll('.overlay polygon.box').length,
            viewBox: view.querySelector('.overlay').getAttribute('viewBox'),
            image: view.querySelector('.page-image') && {
                width: view.querySelector('.page-image').naturalWidth,
                height: view.querySelector('.page-image').naturalHeight,
            },
        }))""",
    )


def test_image_upload_shows_boxes_and_text(page, tmp_path: Path) -> None:
    latin = images.latin_lines()
    path = tmp_path / "latin.png"
    path.write_bytes(images.encode_png(latin.image))
    _upload(page, path)
    _images_loaded(page, 1)
    (view,) = _page_views(page)
    assert_reads(view["texts"], latin.lines)
    assert view["boxes"] == len(latin.lines)
    height, width = latin.image.shape[:2]
    assert view["viewBox"] == f"0 0 {width} {height}"
    assert view["image"] == {"width": width, "height": height}
    assert "1 page, 4 lines" in page.text_content("#status")
    page.screenshot(path=str(tmp_path / "web-ui.png"), full_page=True)

    # Copy text: the clipboard holds the lines.
    page.click("#copy")
    sync_api.expect(page.locator("#status")).to_have_text(re.compile("^Copied"), timeout=TIMEOUT_MS)
    assert page.evaluate("navigator.clipboard.readText()") == "\n".join(view["texts"])

    # Download JSON: the /v1/ocr answer.
    with page.expect_download() as info:
        page.click("#download")
    download = info.value
    assert download.suggested_filename == "latin.ocr.json"
    result = json.loads(Path(download.path()).read_text())
    assert [line["text"] for line in result["pages"][0]["lines"]] == view["texts"]

    # Download searchable PDF: made by the server; poppler reads the lines back from its text
    # layer, over the page image at the upload's own size.
    if shutil.which("pdftotext") is None:
        pytest.skip("poppler-utils is not installed")
    with page.expect_download() as info:
        page.click("#download-pdf")
    download = info.value
    assert download.suggested_filename == "latin.ocr.pdf"
    status = page.locator("#status")
    sync_api.expect(status).to_have_text(re.compile("^Saved a searchable PDF"), timeout=TIMEOUT_MS)
    pdf = Path(download.path())
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True)
    assert cer("\n".join(latin.lines), text.stdout) < 0.05, text.stdout
    images_list = subprocess.run(
        ["pdfimages", "-list", str(pdf)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    (row,) = images_list[2:]  # after the header and its rule: one image, the page's
    assert [int(v) for v in row.split()[3:5]] == [width, height]


def test_pdf_pages_are_rendered_by_the_server(page, tmp_path: Path) -> None:
    latin = images.latin_lines()
    chinese = images.chinese_lines()
    path = tmp_path / "two-pages.pdf"
    # At 144 dpi the server's 2.0 render scale gives back the original pixels.
    path.write_bytes(images.make_pdf([latin.image, chinese.image], dpi=144.0))
    _upload(page, path)
    _images_loaded(page, 2)
    views = _page_views(page)
    assert len(views) == 2
    for view, truth in zip(views, (latin, chinese), strict=True):
        height, width = truth.image.shape[:2]
        assert view["image"] == {"width": width, "height": height}
        assert view["boxes"] == len(view["texts"]) == len(truth.lines)
    # PIL stores PDF page images as JPEG, so a character may differ; the page shows what came back.
    assert_reads(views[0]["texts"][:1], latin.lines[:1], max_cer=0.05)
    page.screenshot(path=str(tmp_path / "web-ui-pdf.png"), full_page=True)


def test_docs_page_lists_every_operation(page, server: Server, tmp_path: Path) -> None:
    spec = page.evaluate("fetch('/openapi.json').then(r => r.json())")
    expected = sum(len(item) for item in spec["paths"].values())
    page.goto(f"{server.url}/docs")
    page.wait_for_selector("details.op")
    assert page.locator("details.op").count() == expected
    assert page.locator('details.op[data-path="/v1/ocr"][data-method="post"]').count() == 1
    # Descriptions' `code` spans are shown as code, not as backticks (schemas stay JSON).
    prose = page.locator("#description, details.op td, details.op p, details.op > summary")
    assert "`" not in " ".join(prose.all_text_contents())
    assert page.locator("details.op td code").count() > 0
    page.screenshot(path=str(tmp_path / "docs.png"), full_page=True)
