"""A batch job's documents out of a real `ocr-serve` (issue 29): the list, each document in every
format read back by a real consumer (poppler's `pdftotext` and `pdfinfo`, an XML parser), the
zip archive listed and read by `zipfile`; another key's job is 404, an admin sees it, an
unfinished job answers 409."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import httpx
import pytest
from lxml import etree

from loadtest.accuracy import cer
from tests import images
from tests.e2e.conftest import Server
from tests.e2e.profiles import DOCUMENT_KEYS

SECRETS = {key_id: DOCUMENT_KEYS[key_id] for key_id in ("alice", "bob")}
ADMIN = DOCUMENT_KEYS["root"]
LATIN = images.latin_lines()
CHINESE = images.chinese_lines()
PNG = images.encode_png(LATIN.image)
# At 144 dpi the server's 2.0 render scale gives back the original pixels.
PDF3 = images.make_pdf([LATIN.image, CHINESE.image, LATIN.image], dpi=144.0)

pytestmark = [
    pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils is not installed"),
    # The shipped models; named keys: two users and an admin (tests/e2e/profiles.py).
    pytest.mark.profile("keys"),
]


def _as(secret: str) -> dict[str, str]:
    return {"X-API-Key": secret}


def _finished_job(server: Server) -> tuple[str, list[dict]]:
    """alice's job of a PNG and a 3-page PDF, followed to its end; its NDJSON lines."""
    files = [
        ("file", ("latin.png", PNG, "image/png")),
        ("file", ("three.pdf", PDF3, "application/pdf")),
    ]
    job = httpx.post(
        f"{server.url}/v1/jobs", files=files, headers=_as(SECRETS["alice"]), timeout=60
    )
    assert job.status_code == 202, job.text
    job_id: str = job.json()["id"]
    results = httpx.get(  # follows the job until it ends
        f"{server.url}/v1/jobs/{job_id}/results", headers=_as(SECRETS["alice"]), timeout=600
    )
    lines = [json.loads(line) for line in results.text.splitlines()]
    assert len(lines) == 4
    return job_id, sorted(lines, key=lambda r: (r["file_index"], r["page"]))


@pytest.fixture(scope="module")
def job(server: Server) -> tuple[str, list[dict]]:
    return _finished_job(server)


def _pdftotext(data: bytes, tmp: Path, name: str) -> list[str]:
    """Each page's text of a PDF, as poppler reads it."""
    path = tmp / name
    path.write_bytes(data)
    info = subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True, check=True)
    assert "Syntax Error" not in info.stderr, info.stderr
    pages = int(next(ln.split()[1] for ln in info.stdout.splitlines() if ln.startswith("Pages:")))
    return [
        subprocess.run(
            ["pdftotext", "-f", str(p), "-l", str(p), str(path), "-"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for p in range(1, pages + 1)
    ]


def _page_text(record: dict) -> str:
    return "\n".join(line["text"] for line in record["lines"])


def test_documents_are_listed_with_their_pages_and_status(server: Server, job) -> None:
    job_id, _ = job
    listing = httpx.get(f"{server.url}/v1/jobs/{job_id}/documents", headers=_as(SECRETS["alice"]))
    assert listing.status_code == 200
    body = listing.json()
    assert body["status"] == "succeeded"
    assert [(d["index"], d["name"], d["pages"], d["status"]) for d in body["documents"]] == [
        (0, "latin.png", 1, "succeeded"),
        (1, "three.pdf", 3, "succeeded"),
    ]
    assert body["documents"][1]["href"] == f"/v1/jobs/{job_id}/documents/1"


def test_each_document_in_each_format_reads_back(server: Server, job, tmp_path: Path) -> None:
    job_id, records = job
    url = f"{server.url}/v1/jobs/{job_id}/documents"
    alice = _as(SECRETS["alice"])

    # PDF: poppler reads back the text of every page, the PDF's three pages kept.
    pdf = httpx.get(f"{url}/1?format=pdf", headers=alice, timeout=300)
    assert pdf.status_code == 200, pdf.text
    assert pdf.headers["content-type"] == "application/pdf"
    assert 'filename="three.pdf.pdf"' in pdf.headers["content-disposition"]
    texts = _pdftotext(pdf.content, tmp_path, "three.pdf")
    assert len(texts) == 3
    for text, record in zip(texts, records[1:], strict=True):
        assert cer(_page_text(record), text) < 0.02, (text, _page_text(record))
    image_pdf = httpx.get(url + "/0", headers={**alice, "Accept": "application/pdf"}, timeout=300)
    assert image_pdf.headers["content-type"] == "application/pdf"
    (text,) = _pdftotext(image_pdf.content, tmp_path, "latin.pdf")
    assert cer(_page_text(records[0]), text) < 0.02
    assert cer("\n".join(LATIN.lines), text) < 0.05

    # Text, by Accept: the lines of every page, pages ended by a form feed.
    plain = httpx.get(f"{url}/1", headers={**alice, "Accept": "text/plain"}, timeout=300)
    assert plain.headers["content-type"].startswith("text/plain")
    pages = plain.text.split("\f")
    assert cer(_page_text(records[2]), pages[1]) < 0.02

    # hOCR and ALTO: three pages, each the OCR page's size, every word of the JSON.
    hocr = httpx.get(f"{url}/1?format=hocr", headers=alice, timeout=300)
    tree = etree.parse(io.BytesIO(hocr.content), etree.HTMLParser())
    titles = tree.xpath("//*[contains(@class, 'ocr_page')]/@title")
    assert len(titles) == 3
    for title, record in zip(titles, records[1:], strict=True):
        assert f"bbox 0 0 {record['width']} {record['height']}" in title
    alto = httpx.get(f"{url}/1?format=alto", headers=alice, timeout=300)
    assert alto.headers["content-type"].startswith("application/alto+xml")
    alto_pages = etree.parse(io.BytesIO(alto.content)).xpath("//*[local-name()='Page']")
    assert [(int(p.get("WIDTH")), int(p.get("HEIGHT"))) for p in alto_pages] == [
        (r["width"], r["height"]) for r in records[1:]
    ]
    strings = etree.parse(io.BytesIO(alto.content)).xpath("//*[local-name()='String']/@CONTENT")
    words = [w["text"] for r in records[1:] for line in r["lines"] for w in line["words"]]
    assert sorted(strings) == sorted(words)

    # JSON: the records with their words and the reading order's blocks.
    body = httpx.get(f"{url}/0?format=json", headers=alice, timeout=300).json()
    assert body["name"] == "latin.png"
    (page,) = body["pages"]
    assert [line["text"] for line in page["lines"]] == [ln["text"] for ln in records[0]["lines"]]
    assert all(line["words"] for line in page["lines"])
    assert sorted(i for block in page["blocks"] for i in block["lines"]) == list(
        range(len(page["lines"]))
    )


def test_the_archive_is_a_zip_of_every_document(server: Server, job, tmp_path: Path) -> None:
    job_id, records = job
    archive = httpx.get(
        f"{server.url}/v1/jobs/{job_id}/archive?format=pdf",
        headers=_as(SECRETS["alice"]),
        timeout=300,
    )
    assert archive.status_code == 200, archive.text
    assert archive.headers["content-type"] == "application/zip"
    assert "content-length" not in archive.headers  # streamed as it is made
    members = zipfile.ZipFile(io.BytesIO(archive.content))
    assert members.testzip() is None
    assert members.namelist() == ["latin.png.pdf", "three.pdf.pdf"]
    texts = _pdftotext(members.read("three.pdf.pdf"), tmp_path, "a.pdf")
    assert cer(_page_text(records[2]), texts[1]) < 0.02
    hocr = httpx.get(
        f"{server.url}/v1/jobs/{job_id}/archive?format=hocr", headers=_as(ADMIN), timeout=300
    )
    assert zipfile.ZipFile(io.BytesIO(hocr.content)).namelist() == [
        "latin.png.hocr",
        "three.pdf.hocr",
    ]


def test_another_key_gets_404_an_admin_sees_it_and_bad_requests_are_4xx(
    server: Server, job
) -> None:
    job_id, _ = job
    base = f"{server.url}/v1/jobs/{job_id}"
    paths = ["/documents", "/documents/0?format=pdf", "/archive?format=text"]
    for path in paths:
        other = httpx.get(base + path, headers=_as(SECRETS["bob"]), timeout=60)
        assert other.status_code == 404, path
        assert other.json()["error"]["code"] == "job_not_found"
        assert httpx.get(base + path, headers=_as(ADMIN), timeout=300).status_code == 200, path
    alice = _as(SECRETS["alice"])
    missing = httpx.get(base + "/documents/2", headers=alice)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "document_not_found")
    assert httpx.get(base + "/documents/0?format=docx", headers=alice).status_code == 422
    refused = httpx.get(base + "/documents/0", headers={**alice, "Accept": "image/png"})
    assert refused.status_code == 406
    assert httpx.get(base + "/archive?format=xml", headers=alice).status_code == 422


def test_an_unfinished_job_answers_409(server: Server) -> None:
    files = [("file", (f"p{i}.pdf", PDF3, "application/pdf")) for i in range(2)]
    alice = _as(SECRETS["alice"])
    job = httpx.post(f"{server.url}/v1/jobs", files=files, headers=alice, timeout=60)
    job_id = job.json()["id"]
    # Six pages take seconds of OCR; these answer at once, before the job ends.
    archive = httpx.get(f"{server.url}/v1/jobs/{job_id}/archive", headers=alice)
    listing = httpx.get(f"{server.url}/v1/jobs/{job_id}/documents", headers=alice).json()
    document = httpx.get(f"{server.url}/v1/jobs/{job_id}/documents/1", headers=alice)
    assert archive.status_code == 409
    assert archive.json()["error"]["code"] == "not_ready"
    assert listing["documents"][1]["status"] == "pending"
    assert document.status_code == 409
    assert "pages finished" in document.json()["error"]["message"]
    httpx.delete(f"{server.url}/v1/jobs/{job_id}", headers=alice)
