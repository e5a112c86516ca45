"""Several model sets in one server (issue 36, items 3 and 4), `ocr-serve` with the shipped
sets: a real French page (Debian's maint-guide-fr) read with `lang=fr` keeps its accents, the
same request without `lang` is read by the default set, `GET /v1/models` says what is served,
and what no set reads, or no endpoint takes, is refused with 422."""

from __future__ import annotations

import base64
import json
import time
import unicodedata
from pathlib import Path

import cv2
import httpx
import pytest

from loadtest import pages
from loadtest.accuracy import cer
from tests.e2e.conftest import Server

pytestmark = pytest.mark.e2e

FRENCH_PDF = Path("/usr/share/doc/maint-guide-fr/maint-guide.fr.pdf")
"""Debian's maint-guide in French (package maint-guide-fr, scripts/system-deps.sh)."""


@pytest.fixture
def sets_server(server: Server) -> Server:
    """The `default` profile: the shipped model sets (config.toml: PP-OCRv5 mobile, and PP-OCRv6
    small)."""
    return server


@pytest.fixture(scope="module")
def french_page() -> tuple[bytes, str]:
    """A page of running French text (the first with 40 accented letters), PNG at 150 dpi, and
    its text layer."""
    if not FRENCH_PDF.is_file():
        pytest.fail(f"{FRENCH_PDF} missing: run scripts/system-deps.sh")
    for index in pages.select_text_pages(FRENCH_PDF, 12):
        truth = pages.pdf_page_text(FRENCH_PDF, index)
        if len(_accented(truth)) >= 40:
            (image,) = pages.render_pdf_pages(FRENCH_PDF, dpi=150, first=index, count=1)
            ok, png = cv2.imencode(".png", image)
            assert ok
            return png.tobytes(), truth
    raise AssertionError("no page of maint-guide.fr.pdf with 40 accented letters")


def _accented(text: str) -> str:
    """The letters of `text` that carry a diacritic (é, è, à, ç, ô, ...)."""
    return "".join(c for c in text if c.isalpha() and _composed(unicodedata.decomposition(c)))


def _composed(decomposition: str) -> bool:
    return len(decomposition.split()) > 1 and not decomposition.startswith("<")


def _v1_text(server: Server, png: bytes, query: str = "") -> tuple[str, float]:
    started = time.monotonic()
    response = httpx.post(
        f"{server.url}/v1/ocr{query}",
        content=png,
        headers={"content-type": "image/png"},
        timeout=600,
    )
    assert response.status_code == 200, response.text
    lines = response.json()["pages"][0]["lines"]
    return "\n".join(line["text"] for line in lines), time.monotonic() - started


def test_a_french_page_with_lang_fr_reads_its_accents(
    sets_server: Server, french_page: tuple[bytes, str]
) -> None:
    png, truth = french_page
    french, french_s = _v1_text(sets_server, png, "?lang=fr")
    default, default_s = _v1_text(sets_server, png)
    want = _accented(truth)
    got_fr, got_default = _accented(french), _accented(default)
    print(
        f"accented letters: text layer {len(want)}, lang=fr {len(got_fr)} ({french_s:.1f} s), "
        f"no lang {len(got_default)} ({default_s:.1f} s); CER lang=fr {cer(truth, french):.4f}, "
        f"no lang {cer(truth, default):.4f}"
    )
    assert len(got_fr) >= 0.9 * len(want)
    assert cer(truth, french) < 0.05
    assert cer(truth, french) < cer(truth, default)
    # Without lang, the default set reads it, as a server with one set did: the same text as
    # naming it, or a language it reads.
    assert _v1_text(sets_server, png, "?lang=en")[0] == default
    assert _v1_text(sets_server, png, "?model=PP-OCRv5_mobile")[0] == default


def test_paddlex_ocr_and_a_job_carry_lang(
    sets_server: Server, french_page: tuple[bytes, str]
) -> None:
    png, truth = french_page
    body = {"file": base64.b64encode(png).decode(), "fileType": 1, "lang": "fr"}
    response = httpx.post(f"{sets_server.url}/ocr", json=body, timeout=600)
    assert response.status_code == 200, response.text
    texts = response.json()["result"]["ocrResults"][0]["prunedResult"]["rec_texts"]
    assert len(_accented("\n".join(texts))) >= 0.9 * len(_accented(truth))

    job = httpx.post(
        f"{sets_server.url}/v1/jobs",
        files={"file": ("fr.png", png, "image/png")},
        data={"options": json.dumps({"lang": "fr"})},
        timeout=60,
    )
    assert job.status_code == 202, job.text
    results = httpx.get(f"{sets_server.url}/v1/jobs/{job.json()['id']}/results", timeout=600)
    (line,) = [json.loads(text) for text in results.text.splitlines()]
    job_text = "\n".join(item["text"] for item in line["lines"])
    assert job_text == "\n".join(texts)


def test_what_no_set_reads_and_unknown_options_are_refused(
    sets_server: Server, french_page: tuple[bytes, str]
) -> None:
    png, _ = french_page
    headers = {"content-type": "image/png"}
    refused = httpx.post(f"{sets_server.url}/v1/ocr?lang=xx", content=png, headers=headers)
    assert refused.status_code == 422
    message = refused.json()["error"]["message"]
    assert "lang='xx'" in message
    assert "fr" in message
    assert "japan" in message

    korean = httpx.post(f"{sets_server.url}/v1/ocr?lang=korean", content=png, headers=headers)
    assert korean.status_code == 422
    assert "models.fetch korean_PP-OCRv5_mobile_rec" in korean.json()["error"]["message"]

    unknown = httpx.post(f"{sets_server.url}/v1/ocr?foo=bar", content=png, headers=headers)
    assert unknown.status_code == 422
    assert "'foo'" in unknown.json()["error"]["message"]

    form = httpx.post(
        f"{sets_server.url}/v1/ocr", files={"file": ("p.png", png, "image/png")}, data={"x": "1"}
    )
    assert form.status_code == 422
    assert "form field 'x'" in form.json()["error"]["message"]

    paddlex = httpx.post(
        f"{sets_server.url}/ocr",
        json={"file": base64.b64encode(png).decode(), "fileType": 1, "lang": "xx"},
    )
    assert paddlex.status_code == 422
    assert paddlex.json()["errorCode"] == 422


def test_v1_models_lists_what_is_served(sets_server: Server) -> None:
    response = httpx.get(f"{sets_server.url}/v1/models", timeout=30)
    assert response.status_code == 200
    body = response.json()
    print(json.dumps(body)[:2000])
    assert body["default"] == "PP-OCRv5_mobile"
    by_name = {entry["name"]: entry for entry in body["models"]}
    assert set(by_name) == {"PP-OCRv5_mobile", "PP-OCRv6_small"}, body["unavailable"]
    assert by_name["PP-OCRv5_mobile"]["default"] is True
    assert by_name["PP-OCRv5_mobile"]["languages"] == ["ch", "chinese_cht", "en", "japan"]
    assert {"fr", "de", "es", "pt", "it", "vi", "ch", "japan"} <= set(
        by_name["PP-OCRv6_small"]["languages"]
    )
    for entry in body["models"]:
        (device,) = entry["devices"]
        assert device["device"] == "cpu"
        assert device["engine"] == "openvino"
        assert device["precision"]
        assert device["ready"] is True
    assert httpx.get(f"{sets_server.url}/v1/models?x=1").status_code == 422
