"""OCRmyPDF with our plugin (`serving.ocrmypdf_plugin`), run as its users run it: the real
`ocrmypdf` command on a scanned PDF of real pages (Debian's maint-guide, rendered, no text layer)
against a real `ocr-serve`, read back by poppler as a reader would."""

from __future__ import annotations

import functools
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import cv2
import httpx
import numpy as np
import pikepdf
import pytest
from PIL import Image

from loadtest.accuracy import cer, word_counts
from loadtest.askew import askew_scans
from loadtest.text_layers import EXTRACTORS, extract
from serving.convert import pdf_pages as pages
from tests.e2e.conftest import CONFIG, ONE_SET, Server, free_port
from tests.images import make_pdf
from tests.poppler import needs_poppler, pdftotext

pytestmark = [pytest.mark.e2e, needs_poppler]

OCRMYPDF = Path(sys.executable).parent / "ocrmypdf"
PLUGIN = "serving.ocrmypdf_plugin"
PDF_NAME = "maint-guide.en.pdf"
DPI = 100
"""The scans' resolution: small pages keep the test cheap; PP-OCRv5 reads them well."""
N_PAGES = 2
SKEW_DEGREES = 3.0
"""--deskew's page: turned this much counter-clockwise, as a page laid crooked on the scanner."""
ASKEW_DPI = 120
"""The askew page's resolution (`loadtest.askew`), as tests/e2e/test_text_layers.py's."""
ZH_DPI = 150
"""Chinese glyphs need more pixels than Latin ones."""
ZH_MAX_CER = 0.08
"""pdftotext's own order against the Chinese page's text layer (4.7% here, of which 2.8% is the
recogniser's on OCRmyPDF's JPEG scan, and the rest the page number pdftotext moves)."""
MAX_CER = 0.03
"""pdftotext of the output against the pages' own text layer."""
CER_OVER_JSON = 0.005
"""The issue's bound: the text layer reads within half a point of our JSON's CER."""
MIN_WORDS_KEPT = 0.97
"""pdftotext's words against the JSON's, for the same image (98.8% here)."""
MIN_WORDS_ON_BOX = 0.9
"""Share of the JSON's words (of 3 characters or more) that pdftotext finds on their boxes. Not
all: the JSON comes from our render of the page, OCRmyPDF's from its own, and a few words read
differently."""


@functools.cache
def real_pages() -> tuple[list[np.ndarray], list[str]]:
    """`N_PAGES` text pages of the guide at `DPI`, and their text layers (the truth)."""
    matches = [p for p in pages.find_real_pdfs() if p.name == PDF_NAME]
    if not matches:
        pytest.skip(f"{PDF_NAME} (scripts/system-deps.sh: maint-guide)")
    picked = pages.text_pages(matches[0], N_PAGES, dpi=DPI)
    return [page.image for page in picked], [page.text for page in picked]


@pytest.fixture
def scanned(tmp_path: Path) -> Path:
    path = tmp_path / "scan.pdf"
    path.write_bytes(make_pdf(real_pages()[0], dpi=DPI))
    return path


def ocrmypdf(
    *args: str | Path, env: dict[str, str] | None = None, timeout_s: float = 600
) -> subprocess.CompletedProcess[str]:
    """The `ocrmypdf` command, our tree first on its path."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), **(env or {})}
    return subprocess.run(
        [str(OCRMYPDF), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


def _json_page(server: Server, image: bytes, lang: str = "en") -> dict[str, Any]:
    """The `/v1/ocr` JSON of a page image, asked as the plugin asks."""
    response = httpx.post(
        f"{server.url}/v1/ocr?words=true&layout=true&orientation=off&lang={lang}",
        content=image,
        headers={"content-type": "image/png"},
        timeout=300,
    )
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()["pages"][0]
    return page


def _bbox_words(pdf: Path) -> list[tuple[float, list[dict[str, Any]]]]:
    """Each page's width and words as `pdftotext -bbox` reads them: text and box in points."""
    root = ET.fromstring(pdftotext(pdf.read_bytes(), "-bbox"))
    ns = {"h": "http://www.w3.org/1999/xhtml"}
    corners = ("xMin", "yMin", "xMax", "yMax")
    return [
        (
            float(page.get("width", 0)),
            [
                {"text": w.text or "", "box": [float(w.get(k, 0)) for k in corners]}
                for w in page.findall("h:word", ns)
            ],
        )
        for page in root.iter("{http://www.w3.org/1999/xhtml}page")
    ]


def test_searchable_pdf_reads_the_pages_text_with_words_on_their_boxes(
    server: Server, scanned: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.pdf"
    run = ocrmypdf(
        "--plugin", PLUGIN, "--ocr-server", server.url, "--jobs", "2", "--keep-temporary-files",
        scanned, out, env={"TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    # The images OCRmyPDF sent (its own render of each page), kept (-k) in its work folder.
    sent = sorted(tmp_path.glob("ocrmypdf.io.*/*_ocr.png"))
    assert len(sent) == N_PAGES
    truths = real_pages()[1]
    read = pdftotext(out.read_bytes()).split("\f")
    in_order = pdftotext(out.read_bytes(), "-raw").split("\f")  # the text layer's own order
    placed = _bbox_words(out)
    for image, truth, text, layer, (width_pt, words_out) in zip(
        sent, truths, read, in_order, placed, strict=False
    ):
        page = _json_page(server, image.read_bytes())
        json_text = "\n".join(page["lines"][i]["text"] for b in page["blocks"] for i in b["lines"])
        assert cer(truth, text) <= MAX_CER
        assert cer(truth, layer) <= cer(truth, json_text) + CER_OVER_JSON
        # The spaces too: pdftotext parts the words as the JSON does (trimmed to their ink, our
        # boxes leave the gaps it reads as spaces; untrimmed, 10% of the words ran together).
        assert len(text.split()) >= MIN_WORDS_KEPT * len(json_text.split())
        # Each word of the JSON answer, in points, where pdftotext finds it: a word there holds
        # its text (pdftotext joins words a narrow gap parts) and the JSON box's centre.
        pt_per_px = width_pt / page["width"]
        words = [w for line in page["lines"] for w in line["words"] if len(w["text"]) >= 2]
        on_box = 0
        for word in words:
            x0, y0, x1, y1 = (v * pt_per_px for v in word["box"])
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            on_box += any(
                word["text"] in found["text"]
                and found["box"][0] <= cx <= found["box"][2]
                and found["box"][1] <= cy <= found["box"][3]
                for found in words_out
            )
        assert on_box >= MIN_WORDS_ON_BOX * len(words), (on_box, len(words))
    metadata = pikepdf.open(out).open_metadata()
    assert "ocr-serving" in metadata.get("xmp:CreatorTool", "")


def test_a_chinese_page_with_tesseracts_language_name(server: Server, tmp_path: Path) -> None:
    """`-l chi_sim` (Tesseract's name) reads Debian's Chinese guide; OCRmyPDF lays CJK runs
    without spaces, and the layer holds our text exactly (pdftotext -raw: its own order)."""
    matches = [p for p in pages.find_real_pdfs() if p.name == "maint-guide.zh-cn.pdf"]
    if not matches:
        pytest.skip("maint-guide.zh-cn.pdf (scripts/system-deps.sh: maint-guide-zh-cn)")
    (page,) = pages.text_pages(matches[0], 1, dpi=ZH_DPI)
    truth = page.text
    scan = tmp_path / "zh.pdf"
    scan.write_bytes(make_pdf([page.image], dpi=ZH_DPI))
    out = tmp_path / "out.pdf"
    run = ocrmypdf(
        "--plugin", PLUGIN, "--ocr-server", server.url, "-l", "chi_sim", "-k", scan, out,
        env={"TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (sent,) = tmp_path.glob("ocrmypdf.io.*/*_ocr.png")
    page = _json_page(server, sent.read_bytes(), "ch")
    json_text = "\n".join(page["lines"][i]["text"] for b in page["blocks"] for i in b["lines"])
    assert cer(truth, pdftotext(out.read_bytes(), "-raw")) <= cer(truth, json_text) + CER_OVER_JSON
    assert cer(truth, pdftotext(out.read_bytes())) <= ZH_MAX_CER


def _slope_degrees(page: dict[str, Any]) -> float:
    """The median angle of the page's long lines' top edges (y down: positive falls right)."""
    edges = [(line["box"][0], line["box"][1]) for line in page["lines"]]
    angles = [
        math.degrees(math.atan2(right[1] - left[1], right[0] - left[0]))
        for left, right in edges
        if right[0] - left[0] > 300
    ]
    return statistics.median(angles)


def test_deskew_straightens_a_skewed_page(server: Server, tmp_path: Path) -> None:
    images, truths = real_pages()
    upright = Image.fromarray(np.ascontiguousarray(images[0][:, :, ::-1]))
    tilted = upright.rotate(SKEW_DEGREES, resample=Image.Resampling.BICUBIC, fillcolor="white")
    scan = tmp_path / "skewed.pdf"
    scan.write_bytes(make_pdf([np.ascontiguousarray(np.asarray(tilted)[:, :, ::-1])], dpi=DPI))
    out = tmp_path / "out.pdf"
    run = ocrmypdf(
        "--plugin", PLUGIN, "--ocr-server", server.url, "--deskew", "-k", scan, out,
        env={"TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (before,) = tmp_path.glob("ocrmypdf.io.*/*_rasterize.png")
    (after,) = tmp_path.glob("ocrmypdf.io.*/*_pp_deskew.png")
    assert abs(_slope_degrees(_json_page(server, before.read_bytes())) + SKEW_DEGREES) < 0.5
    assert abs(_slope_degrees(_json_page(server, after.read_bytes()))) < 0.5
    assert cer(truths[0], pdftotext(out.read_bytes())) <= MAX_CER


def test_an_askew_page_reads_whole_lines_in_our_order(server: Server, tmp_path: Path) -> None:
    """Issue 48's page: maint-guide turned 2.5 degrees, blurred, noised, JPEG. The layer holds
    our words (pdftotext's word F1 within 0.01 of our JSON's) and our order, in pdftotext's
    default mode and pdfminer.six's too: OCRmyPDF's renderer once made each askew line's font as
    tall as its upright box, and pdftotext ran lines and words together (37% CER, F1 0.63)."""
    try:
        (scan,) = askew_scans(1, ASKEW_DPI)
    except RuntimeError:
        pytest.skip("Debian's manuals (scripts/system-deps.sh)")
    image = cv2.imdecode(np.frombuffer(scan.jpeg, np.uint8), cv2.IMREAD_COLOR)
    pdf = tmp_path / "askew.pdf"
    pdf.write_bytes(make_pdf([image], dpi=ASKEW_DPI))
    out = tmp_path / "out.pdf"
    run = ocrmypdf(
        "--plugin", PLUGIN, "--ocr-server", server.url, "-k", pdf, out,
        env={"TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (sent,) = tmp_path.glob("ocrmypdf.io.*/*_ocr.png")
    page = _json_page(server, sent.read_bytes())
    assert abs(page["skew"] - scan.angle_deg) <= 0.3
    ours = "\n".join(page["lines"][i]["text"] for b in page["blocks"] for i in b["lines"])
    read = {tool: "\n".join(extract(out.read_bytes(), tool)) for tool in EXTRACTORS}
    assert word_counts(scan.truth, read["pdftotext"]).f1 >= word_counts(scan.truth, ours).f1 - 0.01
    assert cer(ours, read["pdftotext-raw"]) <= 0.05
    assert cer(ours, read["pymupdf"]) <= 0.05
    assert cer(ours, read["pdftotext"]) <= 0.10
    assert cer(ours, read["pdfminer"]) <= 0.10


def test_rotate_pages_turns_a_sideways_page_upright(server: Server, tmp_path: Path) -> None:
    images, truths = real_pages()
    sideways = tmp_path / "sideways.pdf"
    sideways.write_bytes(make_pdf([np.rot90(images[0])], dpi=DPI))  # a quarter turn left
    out = tmp_path / "out.pdf"
    run = ocrmypdf("--plugin", PLUGIN, "--ocr-server", server.url, "--rotate-pages", sideways, out)
    assert run.returncode == 0, run.stderr
    with pikepdf.open(out) as pdf:
        assert int(pdf.pages[0].obj.get("/Rotate", 0)) % 360 == 90
    assert cer(truths[0], pdftotext(out.read_bytes())) <= MAX_CER


@pytest.mark.skipif(shutil.which("gs") is None, reason="ghostscript (scripts/system-deps.sh)")
def test_output_type_pdfa_is_a_pdfa(server: Server, scanned: Path, tmp_path: Path) -> None:
    from ocrmypdf.pdfa import file_claims_pdfa

    out = tmp_path / "out.pdf"
    run = ocrmypdf(
        "--plugin", PLUGIN, "--ocr-server", server.url, "--output-type", "pdfa", scanned, out
    )
    assert run.returncode == 0, run.stderr
    claim = file_claims_pdfa(out)
    assert claim["pass"], claim
    assert claim["conformance"] == "PDF/A-2b"
    assert cer(real_pages()[1][0], pdftotext(out.read_bytes()).split("\f")[0]) <= MAX_CER


class _FlakyProxy(BaseHTTPRequestHandler):
    """Answers each page's first `/v1/ocr` with 503 and `Retry-After: 1`, as a busy server does,
    and passes everything else to the real server."""

    upstream = ""
    refused: list[str] = []  # noqa: RUF012 (one test's record)
    to_refuse = N_PAGES
    together: threading.Barrier | None = None
    """When set, each page waits here until the other page's request is in too."""
    met: list[bool] = []  # noqa: RUF012

    def _forward(self, body: bytes | None) -> None:
        response = httpx.request(
            self.command,
            self.upstream + self.path,
            content=body,
            headers={"content-type": self.headers.get("content-type", "")},
            timeout=300,
        )
        self.send_response(response.status_code)
        self.send_header("content-type", response.headers.get("content-type", ""))
        self.send_header("content-length", str(len(response.content)))
        self.end_headers()
        self.wfile.write(response.content)

    def do_GET(self) -> None:
        self._forward(None)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        if self.path.startswith("/v1/ocr") and self.together is not None:
            try:
                self.together.wait()
                self.met.append(True)
            except threading.BrokenBarrierError:
                self.met.append(False)
        if self.path.startswith("/v1/ocr") and len(self.refused) < self.to_refuse:
            self.refused.append(self.path)
            payload = b'{"error": {"code": "overloaded", "message": "busy", "request_id": "x"}}'
            self.send_response(503)
            self.send_header("retry-after", "1")
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self._forward(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def flaky(server: Server) -> Iterator[str]:
    _FlakyProxy.upstream = server.url
    _FlakyProxy.refused = []
    _FlakyProxy.to_refuse = N_PAGES
    _FlakyProxy.together = None
    _FlakyProxy.met = []
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _FlakyProxy)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}"
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_503_then_200_is_retried_after_retry_after(
    flaky: str, scanned: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.pdf"
    run = ocrmypdf("--plugin", PLUGIN, "--ocr-server", flaky, "--jobs", "2", scanned, out)
    assert run.returncode == 0, run.stderr
    assert len(_FlakyProxy.refused) == N_PAGES
    assert all("lang=en" in path for path in _FlakyProxy.refused)  # OCRmyPDF's default -l eng
    assert "answered 503" in run.stderr
    texts = pdftotext(out.read_bytes()).split("\f")
    for truth, text in zip(real_pages()[1], texts, strict=False):
        assert cer(truth, text) <= MAX_CER


def test_jobs_pages_reach_the_server_together(flaky: str, scanned: Path, tmp_path: Path) -> None:
    """`--jobs 2`: both pages' requests are in flight at once (each waits at the proxy for the
    other; sent one after the other, the first would wait out the barrier's timeout alone)."""
    _FlakyProxy.to_refuse = 0
    _FlakyProxy.together = threading.Barrier(N_PAGES, timeout=120)
    out = tmp_path / "out.pdf"
    run = ocrmypdf("--plugin", PLUGIN, "--ocr-server", flaky, "--jobs", "2", scanned, out)
    assert run.returncode == 0, run.stderr
    assert _FlakyProxy.met == [True] * N_PAGES


def test_a_page_refused_after_the_retries_stops_the_run_with_the_status(
    flaky: str, scanned: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.pdf"
    run = ocrmypdf("--plugin", PLUGIN, "--ocr-server", flaky, "--ocr-retries", "0", scanned, out)
    assert run.returncode == 7, run.stderr  # OCRmyPDF's child_process_error, as a failed Tesseract
    assert "answered 503 to POST /v1/ocr: overloaded: busy" in run.stderr
    assert "Traceback" not in run.stderr
    assert not out.exists()


def test_a_server_that_is_down_is_a_clear_error(scanned: Path, tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    run = ocrmypdf("--plugin", PLUGIN, "--ocr-server", down, scanned, tmp_path / "out.pdf")
    # Found before any page, as OCRmyPDF finds a missing Tesseract: exit 3, missing_dependency.
    assert run.returncode == 3, run.stderr
    assert f"cannot reach the OCR server at {down}" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "out.pdf").exists()
    sandwich = ocrmypdf(
        "--plugin", PLUGIN, "--ocr-server", down, "--pdf-renderer", "sandwich", scanned,
        tmp_path / "out.pdf",
    )  # fmt: skip
    assert sandwich.returncode == 1
    assert "not sandwich" in sandwich.stderr


def test_languages_are_the_servers(server: Server, scanned: Path, tmp_path: Path) -> None:
    run = ocrmypdf(
        "--plugin", PLUGIN, "--ocr-server", server.url, "-l", "xx", scanned, tmp_path / "o.pdf"
    )
    assert run.returncode != 0
    # OCRmyPDF's own check, against the languages GET /v1/models names.
    assert "does not have language data" in run.stderr
    assert "xx" in run.stderr


def test_other_engines_are_not_taken_over(scanned: Path, tmp_path: Path) -> None:
    """Loaded with --plugin, the plugin leaves `--ocr-engine tesseract` and `none` alone (the
    server named is down: had our engine run, the run would fail); without --plugin it is not
    loaded at all (the project declares no entry point)."""
    assert "--ocr-server" not in ocrmypdf("--help").stdout
    down = f"http://127.0.0.1:{free_port()}"
    none = tmp_path / "none.pdf"
    run = ocrmypdf("--plugin", PLUGIN, "--ocr-server", down, "--ocr-engine", "none", scanned, none)
    assert run.returncode == 0, run.stderr
    assert pdftotext(none.read_bytes()).strip() == ""
    if shutil.which("tesseract") is None:
        return
    tess = tmp_path / "tesseract.pdf"
    run = ocrmypdf(
        "--plugin", PLUGIN, "--ocr-server", down, "--ocr-engine", "tesseract", scanned, tess
    )
    assert run.returncode == 0, run.stderr
    assert "Tesseract" in pikepdf.open(tess).open_metadata().get("xmp:CreatorTool", "")
    assert pdftotext(tess.read_bytes()).strip()


def test_local_mode_runs_the_models_in_process(tmp_path: Path) -> None:
    images, truths = real_pages()
    scan = tmp_path / "one.pdf"
    scan.write_bytes(make_pdf(images[:1], dpi=DPI))
    config = tmp_path / "config.toml"
    # The default det and rec alone load in the plugin's process: the page is upright English.
    config.write_text(CONFIG + ONE_SET)
    out = tmp_path / "out.pdf"
    # Page workers as processes would each lack the runtime: the plugin makes them threads.
    run = ocrmypdf("--plugin", PLUGIN, "--ocr-config", config, "--no-use-threads", scan, out)
    assert run.returncode == 0, run.stderr
    assert "ocr-serving" in pikepdf.open(out).open_metadata().get("xmp:CreatorTool", "")
    assert cer(truths[0], pdftotext(out.read_bytes())) <= MAX_CER


# `auth.api_keys_file` holding plugin-key (tests/e2e/profiles.py).
@pytest.mark.profile("keys")
def test_api_key_from_the_environment(server: Server, tmp_path: Path) -> None:
    keyed = server
    images, truths = real_pages()
    scan = tmp_path / "one.pdf"
    scan.write_bytes(make_pdf(images[:1], dpi=DPI))
    out = tmp_path / "out.pdf"
    refused = ocrmypdf("--plugin", PLUGIN, "--ocr-server", keyed.url, scan, out)
    assert refused.returncode == 3, refused.stderr
    assert "answered 401 to GET /v1/models: unauthorized" in refused.stderr
    run = ocrmypdf(
        "--plugin", PLUGIN, "--ocr-server", keyed.url, scan, out,
        env={"OCR_SERVER_API_KEY": "plugin-key"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "plugin-key" not in run.stderr
    assert cer(truths[0], pdftotext(out.read_bytes())) <= MAX_CER
