"""`ocr-serve` as a user runs it: real HTTP, real models, PNG, JPEG and PDF on both APIs."""

from __future__ import annotations

import base64
import glob
import io
import signal
import struct
import time
import zlib

import httpx
import numpy as np
import pytest
from PIL import Image

from serving.workers import shm
from tests import images
from tests.e2e.conftest import CONFIG, ONE_SET, Server, fresh_server, stop_server, wait_ready
from tests.reading import MAX_CER, assert_reads


def _texts_ok(texts: list[str], truth: list[str], *, lossy: bool = False) -> None:
    # PIL stores PDF page images as JPEG: the text must survive, spaces may not.
    assert_reads(texts, truth, max_cer=0.05 if lossy else MAX_CER, spaces=not lossy)


@pytest.fixture(scope="module")
def documents() -> dict[str, tuple[bytes, list[str], str]]:
    latin = images.latin_lines()
    chinese = images.chinese_lines()
    # At 144 dpi the server's 2.0 render scale gives back the original pixels.
    pdf = images.make_pdf([latin.image, chinese.image], dpi=144.0)
    return {
        "png": (images.encode_png(latin.image), latin.lines, "image/png"),
        "jpeg": (images.encode_jpeg(latin.image), latin.lines, "image/jpeg"),
        "pdf": (pdf, latin.lines + chinese.lines, "application/pdf"),
    }


def test_readyz_was_503_until_warm(server: Server) -> None:
    assert server.readiness[-1] == 200  # type: ignore[attr-defined]
    assert httpx.get(f"{server.url}/livez").status_code == 200
    health = httpx.get(f"{server.url}/health").json()
    assert health["errorCode"] == 0
    assert health["errorMsg"] == "Healthy"


@pytest.mark.parametrize("kind", ["png", "jpeg", "pdf"])
def test_paddlex_endpoint(server: Server, documents, kind: str) -> None:
    data, truth, _ = documents[kind]
    body = {
        "file": base64.b64encode(data).decode(),
        "fileType": 0 if kind == "pdf" else 1,
        "logId": "test-log-id",
    }
    response = httpx.post(f"{server.url}/ocr", json=body, timeout=120)
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["logId"] == "test-log-id"
    results = payload["result"]["ocrResults"]
    texts = [t for r in results for t in r["prunedResult"]["rec_texts"]]
    _texts_ok(texts, truth, lossy=kind == "pdf")
    info = payload["result"]["dataInfo"]
    if kind == "pdf":
        assert info["type"] == "pdf"
        assert info["numPages"] == 2
        assert len(info["pages"]) == 2
    else:
        assert info["type"] == "image"


@pytest.mark.parametrize("kind", ["png", "jpeg", "pdf"])
def test_v1_raw_body(server: Server, documents, kind: str) -> None:
    data, truth, content_type = documents[kind]
    response = httpx.post(
        f"{server.url}/v1/ocr", content=data, headers={"content-type": content_type}, timeout=120
    )
    assert response.status_code == 200, response.text
    pages = response.json()["pages"]
    assert [p["page"] for p in pages] == list(range(2 if kind == "pdf" else 1))
    texts = [line["text"] for p in pages for line in p["lines"]]
    _texts_ok(texts, truth, lossy=kind == "pdf")
    for page in pages:
        for line in page["lines"]:
            assert len(line["box"]) == 4
            assert 0 < line["score"] <= 1


@pytest.mark.parametrize("kind", ["png", "pdf"])
def test_v1_multipart(server: Server, documents, kind: str) -> None:
    data, truth, content_type = documents[kind]
    response = httpx.post(
        f"{server.url}/v1/ocr", files={"file": (f"doc.{kind}", data, content_type)}, timeout=120
    )
    assert response.status_code == 200, response.text
    texts = [line["text"] for p in response.json()["pages"] for line in p["lines"]]
    _texts_ok(texts, truth, lossy=kind == "pdf")


def test_visualize_returns_images(server: Server, documents) -> None:
    data, _, _ = documents["png"]
    body = {"file": base64.b64encode(data).decode(), "fileType": 1, "visualize": True}
    result = httpx.post(f"{server.url}/ocr", json=body, timeout=120).json()["result"]
    entry = result["ocrResults"][0]
    assert base64.b64decode(entry["ocrImage"])[:3] == b"\xff\xd8\xff"
    assert base64.b64decode(entry["inputImage"])[:3] == b"\xff\xd8\xff"


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"file": "not base64!!", "fileType": 1}, 422, "base64"),
        ({"file": base64.b64encode(b"hello").decode()}, 422, "File type cannot be determined"),
        ({"file": base64.b64encode(b"hello").decode(), "fileType": 1}, 422, "Invalid input"),
        ({"file": base64.b64encode(b"hello").decode(), "fileType": 7}, 422, "fileType"),
        ({"fileType": 1}, 422, "file"),
        ({"file": "http://example.com/a.png", "fileType": 1}, 422, "URL inputs are disabled"),
    ],
)
def test_paddlex_errors(server: Server, body: dict, status: int, message: str) -> None:
    response = httpx.post(f"{server.url}/ocr", json=body, timeout=60)
    assert response.status_code == status
    payload = response.json()
    assert payload["errorCode"] == status
    assert message in payload["errorMsg"]
    assert "Traceback" not in response.text


# A server without the textline classifier (`models.cls` empty): the default profile has one.
@pytest.mark.profile("ppocrv6-onnxruntime")
def test_textline_orientation_without_its_classifier_is_refused(server: Server) -> None:
    body = {"file": "aGVsbG8=", "fileType": 1, "useTextlineOrientation": True}
    response = httpx.post(f"{server.url}/ocr", json=body, timeout=60)
    assert response.status_code == 422
    assert response.json()["errorCode"] == 422
    assert "textline" in response.json()["errorMsg"]


def test_pdf_over_page_cap_is_refused(server: Server) -> None:
    pdf = images.make_pdf([images.empty_page(200, 200)] * 4)
    body = {"file": base64.b64encode(pdf).decode(), "fileType": 0}
    response = httpx.post(f"{server.url}/ocr", json=body, timeout=60)
    assert response.status_code == 422
    assert "4 pages" in response.json()["errorMsg"]
    assert "at most 3" in response.json()["errorMsg"]


def test_v1_errors(server: Server) -> None:
    too_big = httpx.post(
        f"{server.url}/v1/ocr", content=b"\0" * 8_000_001, headers={"content-type": "image/png"}
    )
    assert too_big.status_code == 413
    assert too_big.json()["error"]["code"] == "payload_too_large"
    wrong_type = httpx.post(
        f"{server.url}/v1/ocr", content=b"x", headers={"content-type": "text/plain"}
    )
    assert wrong_type.status_code == 415
    garbage = httpx.post(
        f"{server.url}/v1/ocr", content=b"garbage", headers={"content-type": "image/png"}
    )
    assert garbage.status_code == 422
    # The server keeps serving after bad input.
    assert httpx.get(f"{server.url}/readyz").status_code == 200


def test_a_client_sets_its_own_deadline(server: Server) -> None:
    """`X-Request-Timeout`: seconds, at most `server.request_timeout_s`; not a positive number is
    422 on both APIs, and a deadline too short for the page is 504, the server serving on. A
    deadline the server's pace cannot meet while it is busy: tests/e2e/test_deadline_shedding.py
    (on an engine of known pace, not this machine's)."""
    png = images.encode_png(images.latin_lines().image)
    png_body = {"file": base64.b64encode(png).decode(), "fileType": 1}
    for bad in ("soon", "0", "-1", "nan", "inf"):
        headers = {"content-type": "image/png", "x-request-timeout": bad}
        native = httpx.post(f"{server.url}/v1/ocr", content=png, headers=headers, timeout=60)
        assert native.status_code == 422, bad
        assert native.json()["error"]["code"] == "validation_failed"
        assert "X-Request-Timeout" in native.json()["error"]["message"]
        paddlex = httpx.post(
            f"{server.url}/ocr", json=png_body, headers={"x-request-timeout": bad}, timeout=60
        )
        assert paddlex.json()["errorCode"] == 422, bad
    dense = images.encode_png(images.dense_page().image)
    late = httpx.post(
        f"{server.url}/v1/ocr",
        content=dense,
        headers={"content-type": "image/png", "x-request-timeout": "0.001"},
        timeout=60,
    )
    assert late.status_code == 504
    assert late.json()["error"]["code"] == "deadline_exceeded"
    # Longer than the server allows: the server's own deadline, and the page is read.
    for timeout in ("60", "1e9"):
        ok = httpx.post(
            f"{server.url}/ocr", json=png_body, headers={"x-request-timeout": timeout}, timeout=120
        )
        assert ok.status_code == 200, ok.text
        texts = ok.json()["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]
        assert_reads(texts, images.latin_lines().lines)


def _tiff_of(pages: list[np.ndarray]) -> bytes:
    frames = [Image.fromarray(np.ascontiguousarray(page[:, :, ::-1])) for page in pages]
    buf = io.BytesIO()
    frames[0].save(buf, format="TIFF", save_all=True, append_images=frames[1:])
    return buf.getvalue()


def test_multi_frame_tiff_is_one_page_per_frame(server: Server) -> None:
    latin = images.latin_lines()
    body = {"file": base64.b64encode(_tiff_of([latin.image] * 2)).decode(), "fileType": 1}
    response = httpx.post(f"{server.url}/ocr", json=body, timeout=120)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    height, width = latin.image.shape[:2]
    assert result["dataInfo"] == {
        "numPages": 2,
        "pages": [{"width": width, "height": height}] * 2,
        "type": "tiff",
    }
    for entry in result["ocrResults"]:
        assert entry["prunedResult"]["rec_texts"] == latin.lines
    over = {"file": base64.b64encode(_tiff_of([latin.image] * 4)).decode(), "fileType": 1}
    refused = httpx.post(f"{server.url}/ocr", json=over, timeout=60)
    assert refused.status_code == 422
    assert "input.max_pdf_pages" in refused.json()["errorMsg"]


def _zeros_png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    packer = zlib.compressobj(9)
    row = b"\0" * (1 + 3 * width)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def test_bad_input_gets_clear_4xx_and_the_server_keeps_serving(server: Server) -> None:
    bomb = _zeros_png(20000, 20000)
    started = time.monotonic()
    response = httpx.post(
        f"{server.url}/v1/ocr", content=bomb, headers={"content-type": "image/png"}, timeout=60
    )
    assert response.status_code == 422
    assert "input.max_image_pixels" in response.json()["error"]["message"]
    assert time.monotonic() - started < 10
    truncated = images.encode_jpeg(images.latin_lines().image)
    truncated = truncated[: len(truncated) // 2]
    body = {"file": base64.b64encode(truncated).decode(), "fileType": 1}
    response = httpx.post(f"{server.url}/ocr", json=body, timeout=60)
    assert response.status_code == 422
    assert "truncated" in response.json()["errorMsg"]
    for size in ((1, 1), (20000, 20)):
        tiny = images.encode_png(np.full((size[1], size[0], 3), 255, np.uint8))
        response = httpx.post(
            f"{server.url}/v1/ocr", content=tiny, headers={"content-type": "image/png"}, timeout=120
        )
        assert response.status_code == 200, response.text
        assert response.json()["pages"][0]["lines"] == []
    assert httpx.get(f"{server.url}/readyz").status_code == 200


# `auth.api_keys_file` holding e2e-key; URL inputs allowed from 127.0.0.1 (tests/e2e/profiles.py).
@pytest.mark.profile("keys")
def test_api_keys_and_open_probes(server: Server) -> None:
    srv = server
    png = images.encode_png(images.latin_lines().image)
    body = {"file": base64.b64encode(png).decode(), "fileType": 1}
    refused = httpx.post(f"{srv.url}/ocr", json=body, timeout=60)
    assert refused.status_code == 401
    assert refused.json()["errorCode"] == 401
    v1 = httpx.post(f"{srv.url}/v1/ocr", content=png, headers={"content-type": "image/png"})
    assert v1.status_code == 401
    assert v1.json()["error"]["code"] == "unauthorized"
    ok = httpx.post(f"{srv.url}/ocr", json=body, headers={"X-API-Key": "e2e-key"}, timeout=120)
    assert ok.status_code == 200, ok.text
    for path in ("/livez", "/readyz", "/health", "/metrics"):
        assert httpx.get(f"{srv.url}{path}").status_code == 200
    # URL inputs, switched on: only allow-listed hosts, never a loopback address.
    key = {"X-API-Key": "e2e-key"}
    for url, file_type, message in [
        ("http://files.example/a.png", 1, "not allowed (input.url_allowed_hosts)"),
        ("http://127.0.0.1/livez.png", 1, "loopback address"),
        (f"{srv.url}/livez.png", 1, "input.url_allowed_ports"),  # not port 80 (issue 49)
        (f"{srv.url}/page.html", None, "Unsupported file type"),
    ]:
        url_body = {"file": url, "fileType": file_type}
        response = httpx.post(f"{srv.url}/ocr", json=url_body, headers=key, timeout=60)
        assert response.status_code == 422, response.text
        assert message in response.json()["errorMsg"]


def test_sigterm_stops_cleanly_and_leaves_no_shared_memory(tmp_path) -> None:
    srv = fresh_server(tmp_path, CONFIG + ONE_SET)
    wait_ready(srv)
    latin = images.latin_lines()
    response = httpx.post(
        f"{srv.url}/v1/ocr",
        content=images.encode_png(latin.image),
        headers={"content-type": "image/png"},
        timeout=120,
    )
    assert response.status_code == 200
    pid = srv.process.pid
    # Uvicorn re-raises the signal once it has shut down, so the exit status is -SIGTERM.
    assert stop_server(srv) in (0, -signal.SIGTERM)
    assert glob.glob(f"/dev/shm/{shm.server_prefix(pid)}*") == []
    assert glob.glob(f"/dev/shm/ocrsrv.{pid}x*.lock") == []  # its claim on the prefix too
    log = srv.log.read_text()
    assert "Application shutdown complete" in log
    assert "Traceback" not in log
