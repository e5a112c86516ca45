"""`ocr-serve` as a user runs it: real HTTP, real models, PNG, JPEG and PDF on both APIs."""

from __future__ import annotations

import base64
import glob
import signal

import httpx
import pytest

from loadtest.accuracy import cer
from tests import images
from tests.e2e.conftest import Server, start_server, stop_server, wait_ready


def _texts_ok(texts: list[str], truth: list[str], *, lossy: bool = False) -> None:
    if not lossy:
        assert texts == truth
        return
    # PIL stores PDF page images as JPEG: the text must survive, spaces may not.
    assert len(texts) == len(truth)
    assert cer("".join(truth), "".join(texts)) < 0.05


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
        ({"file": "aGVsbG8=", "fileType": 1, "useTextlineOrientation": True}, 422, "textline"),
    ],
)
def test_paddlex_errors(server: Server, body: dict, status: int, message: str) -> None:
    response = httpx.post(f"{server.url}/ocr", json=body, timeout=60)
    assert response.status_code == status
    payload = response.json()
    assert payload["errorCode"] == status
    assert message in payload["errorMsg"]
    assert "Traceback" not in response.text


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


def test_sigterm_stops_cleanly_and_leaves_no_shared_memory(tmp_path) -> None:
    srv = start_server(tmp_path)
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
    assert glob.glob(f"/dev/shm/ocrsrv{pid}_*") == []
    log = srv.log.read_text()
    assert "Application shutdown complete" in log
    assert "Traceback" not in log
