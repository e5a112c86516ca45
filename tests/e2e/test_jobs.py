"""Batch jobs on `ocr-serve`: lifecycle, streamed results, cancel, limits, kill -9 and resume."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import zipfile
from datetime import datetime
from pathlib import Path

import httpx
import psutil
import pytest

from loadtest.accuracy import cer
from tests import images
from tests.e2e.conftest import (
    ONE_SET,
    Server,
    fresh_server,
    kill_leftovers,
    stop_server,
    wait_ready,
)
from tests.e2e.profiles import jobs_config

pytestmark = pytest.mark.profile("jobs-sqlite")

LATIN = images.latin_lines()
CHINESE = images.chinese_lines()
LATIN_PNG = images.encode_png(LATIN.image)
CHINESE_PNG = images.encode_png(CHINESE.image)
# At 144 dpi the server's 2.0 render scale gives back the original pixels.
PDF3 = images.make_pdf([LATIN.image, CHINESE.image, LATIN.image], dpi=144.0)
PDF3_TRUTH = [LATIN.lines, CHINESE.lines, LATIN.lines]


@pytest.fixture
def jobs_server(server: Server) -> Server:
    """`jobs-sqlite`: the shipped models and the SQLite job store (tests/e2e/profiles.py)."""
    return server


def _submit(server: Server, files: list[tuple[str, bytes]], **data: str) -> httpx.Response:
    parts = [("file", (name, body, "application/octet-stream")) for name, body in files]
    return httpx.post(f"{server.url}/v1/jobs", files=parts, data=data, timeout=60)


class Follower(threading.Thread):
    """Reads a job's NDJSON results stream, noting when each line arrived."""

    def __init__(self, server: Server, job_id: str) -> None:
        super().__init__(daemon=True)
        self.url = f"{server.url}/v1/jobs/{job_id}/results"
        self.lines: list[dict] = []
        self.arrived: list[float] = []
        self.first = threading.Event()
        self.status = 0
        self.content_type = ""
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with httpx.stream("GET", self.url, timeout=300) as response:
                self.status = response.status_code
                self.content_type = response.headers["content-type"]
                for line in response.iter_lines():
                    if line:
                        self.lines.append(json.loads(line))
                        self.arrived.append(time.time())
                        self.first.set()
        except httpx.TransportError as err:  # the server was killed
            self.error = err


def _texts(lines: list[dict]) -> dict[tuple[int, int], list[str]]:
    return {(ln["file_index"], ln["page"]): [t["text"] for t in ln["lines"]] for ln in lines}


def _pdf_ok(pages: list[list[str]]) -> bool:
    # PIL stores PDF page images as JPEG: the text must survive, spaces and a few CJK strokes not.
    truth = "".join("".join(lines) for lines in PDF3_TRUTH)
    found = "".join("".join(lines) for lines in pages)
    return [len(p) for p in pages] == [len(t) for t in PDF3_TRUTH] and cer(truth, found) < 0.05


def _timestamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_job_lifecycle_streams_results_while_ocr_is_served(jobs_server: Server) -> None:
    url = jobs_server.url
    files = [("latin.png", LATIN_PNG), ("chinese.png", CHINESE_PNG), ("doc.pdf", PDF3)]
    response = _submit(jobs_server, files, options=json.dumps({"det_thresh": 0.3}))
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["status"] == "queued"
    assert job["pages_total"] == 5
    follower = Follower(jobs_server, job["id"])
    follower.start()

    # Interactive requests are served while the job's pages queue behind them.
    body = {"file": base64.b64encode(LATIN_PNG).decode(), "fileType": 1}
    ocr = httpx.post(f"{url}/ocr", json=body, timeout=120)
    ocr_answered = time.time()
    assert ocr.status_code == 200
    assert ocr.json()["result"]["ocrResults"][0]["prunedResult"]["rec_texts"] == LATIN.lines

    follower.join(timeout=300)
    assert not follower.is_alive()
    assert follower.status == 200
    assert follower.content_type.startswith("application/x-ndjson")
    status = httpx.get(f"{url}/v1/jobs/{job['id']}").json()
    assert status["status"] == "succeeded"
    assert (status["pages_done"], status["pages_failed"], status["failed_pages"]) == (5, 0, [])
    assert [f["name"] for f in status["files"]] == ["latin.png", "chinese.png", "doc.pdf"]
    assert status["options"] == {"det_thresh": 0.3}
    finished = _timestamp(status["finished_at"])
    assert _timestamp(status["created_at"]) <= _timestamp(status["started_at"]) <= finished
    # The stream gave pages as they ended, before the job did; /ocr was answered meanwhile.
    assert follower.arrived[0] < finished
    assert ocr_answered < finished

    # Each page exactly once, with its text.
    keys = [(ln["file_index"], ln["page"]) for ln in follower.lines]
    assert sorted(keys) == [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2)]
    texts = _texts(follower.lines)
    assert texts[(0, 0)] == LATIN.lines
    assert texts[(1, 0)] == CHINESE.lines
    pdf_pages = [texts[(2, page)] for page in range(3)]
    assert _pdf_ok(pdf_pages), pdf_pages
    # Pages rendered one at a time read exactly as the whole PDF through /v1/ocr.
    reference = httpx.post(
        f"{url}/v1/ocr", content=PDF3, headers={"content-type": "application/pdf"}, timeout=120
    )
    assert [[ln["text"] for ln in p["lines"]] for p in reference.json()["pages"]] == pdf_pages
    assert {ln["file"] for ln in follower.lines} == {"latin.png", "chinese.png", "doc.pdf"}
    assert all(ln["width"] > 0 and ln["height"] > 0 for ln in follower.lines)

    # Read again once finished: the same lines.
    again = httpx.get(f"{url}/v1/jobs/{job['id']}/results", timeout=60)
    assert sorted(json.loads(ln)["page"] for ln in again.text.splitlines()) == [0, 0, 0, 1, 2]
    assert _texts([json.loads(ln) for ln in again.text.splitlines()]) == texts

    # Plain text in document order, pages ended by form feeds.
    text = httpx.get(f"{url}/v1/jobs/{job['id']}/results?format=text", timeout=60)
    assert text.headers["content-type"].startswith("text/plain")
    pages = text.text.split("\f")
    assert len(pages) == 6
    assert pages[5] == ""
    assert pages[0].splitlines() == LATIN.lines
    assert pages[1].splitlines() == CHINESE.lines
    assert [page.splitlines() for page in pages[2:5]] == pdf_pages

    listed = httpx.get(f"{url}/v1/jobs").json()["jobs"]
    assert job["id"] in [j["id"] for j in listed]
    assert httpx.get(f"{url}/v1/jobs?status=succeeded").json()["jobs"][0]["id"] == job["id"]
    metrics = httpx.get(f"{url}/metrics").text
    assert 'ocr_jobs{status="succeeded"} 1.0' in metrics
    # The job's pages had some of both pools' recent seconds, the requests the rest.
    for pool in ("devices", "cpu_workers"):
        found = re.search(rf'^ocr_background_share{{pool="{pool}"}} (\S+)$', metrics, re.M)
        assert found is not None, pool
        assert 0.0 < float(found.group(1)) < 1.0, pool


def test_cancel_stops_the_job_and_delete_removes_it(jobs_server: Server) -> None:
    url = jobs_server.url
    response = _submit(jobs_server, [("a.pdf", PDF3), ("b.pdf", PDF3)])
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    follower = Follower(jobs_server, job_id)
    follower.start()
    assert follower.first.wait(timeout=120)

    cancelled = httpx.post(f"{url}/v1/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    follower.join(timeout=60)
    assert not follower.is_alive()  # the stream ends with the job
    done = httpx.get(f"{url}/v1/jobs/{job_id}").json()["pages_done"]
    assert 1 <= done < 6
    time.sleep(2.0)  # pages that were in flight are dropped, not committed later
    status = httpx.get(f"{url}/v1/jobs/{job_id}").json()
    assert (status["status"], status["pages_done"]) == ("cancelled", done)
    assert status["finished_at"] is not None

    job_dir = jobs_server.data_dir / "jobs" / job_id
    assert job_dir.is_dir()
    deleted = httpx.delete(f"{url}/v1/jobs/{job_id}")
    assert deleted.status_code == 200
    assert deleted.json() == {"id": job_id, "deleted": True}
    assert not job_dir.exists()
    missing = httpx.get(f"{url}/v1/jobs/{job_id}")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "job_not_found"
    assert httpx.get(f"{url}/v1/jobs/{job_id}/results").status_code == 404
    assert httpx.delete(f"{url}/v1/jobs/{job_id}").status_code == 404


def _listing(root: Path) -> set[str]:
    """The job folders under `root`: none before the server's first job (this test may be the
    first its server gets, on a pytest worker that started it for this group)."""
    return set(os.listdir(root)) if root.exists() else set()


def test_limits_are_refused_before_any_work(jobs_server: Server) -> None:
    url = jobs_server.url
    root = jobs_server.data_dir / "jobs"
    jobs_before = httpx.get(f"{url}/v1/jobs").json()["jobs"]
    dirs_before = _listing(root)

    too_big = _submit(jobs_server, [("big.png", LATIN_PNG + b"\0" * 1_100_000)])
    assert too_big.status_code == 413
    assert too_big.json()["error"]["code"] == "payload_too_large"
    assert "jobs.max_upload_bytes" in too_big.json()["error"]["message"]

    too_many_files = _submit(jobs_server, [(f"{i}.png", LATIN_PNG) for i in range(5)])
    assert too_many_files.status_code == 422
    assert "jobs.max_files_per_job" in too_many_files.json()["error"]["message"]

    pack = io.BytesIO()
    with zipfile.ZipFile(pack, "w") as archive:
        for i in range(5):
            archive.writestr(f"page{i}.png", LATIN_PNG)
    zipped = _submit(jobs_server, [("pack.zip", pack.getvalue())])
    assert zipped.status_code == 422
    assert "jobs.max_files_per_job" in zipped.json()["error"]["message"]

    seven = images.make_pdf([LATIN.image] * 7, dpi=144.0)
    too_many_pages = _submit(jobs_server, [("seven.pdf", seven)])
    assert too_many_pages.status_code == 422
    assert "jobs.max_pages_per_job" in too_many_pages.json()["error"]["message"]
    across_files = _submit(jobs_server, [("a.pdf", PDF3), ("b.pdf", PDF3), ("c.png", LATIN_PNG)])
    assert across_files.status_code == 422
    assert "c.png" in across_files.json()["error"]["message"]

    not_a_document = _submit(jobs_server, [("notes.txt", b"hello")])
    assert not_a_document.status_code == 422
    assert "notes.txt" in not_a_document.json()["error"]["message"]
    assert _submit(jobs_server, []).status_code in (415, 422)
    assert httpx.post(f"{url}/v1/jobs", json={"file": "x"}).status_code == 415
    bad_option = _submit(jobs_server, [("a.png", LATIN_PNG)], options='{"det_thresh": "x"}')
    assert bad_option.status_code == 422

    assert httpx.get(f"{url}/v1/jobs").json()["jobs"] == jobs_before
    assert _listing(root) == dirs_before


def test_zip_of_documents_is_one_job(jobs_server: Server) -> None:
    pack = io.BytesIO()
    with zipfile.ZipFile(pack, "w") as archive:
        archive.writestr("scans/latin.png", LATIN_PNG)
        archive.writestr("__MACOSX/scans/._latin.png", b"resource fork")
        archive.writestr("chinese.png", CHINESE_PNG)
    response = _submit(jobs_server, [("pack.zip", pack.getvalue())])
    assert response.status_code == 202, response.text
    assert response.json()["pages_total"] == 2
    job_id = response.json()["id"]
    lines = httpx.get(f"{jobs_server.url}/v1/jobs/{job_id}/results", timeout=120).text
    records = {json.loads(ln)["file"]: json.loads(ln) for ln in lines.splitlines()}
    assert set(records) == {"pack.zip/scans/latin.png", "pack.zip/chinese.png"}
    assert [t["text"] for t in records["pack.zip/scans/latin.png"]["lines"]] == LATIN.lines


def test_ocr_batch_submits_to_the_server(jobs_server: Server, tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "latin.png").write_bytes(LATIN_PNG)
    (inputs / "doc.pdf").write_bytes(PDF3)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "serving.batch.cli", str(inputs), "--out", str(out)]
    command += ["--server", jobs_server.url, "--quiet"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "4 to do, 0 skipped" in first.stdout
    records = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["file"], r["page"]) for r in records] == [
        ("doc.pdf", 0),
        ("doc.pdf", 1),
        ("doc.pdf", 2),
        ("latin.png", 0),
    ]
    assert [t["text"] for t in records[3]["lines"]] == LATIN.lines

    jobs_before = httpx.get(f"{jobs_server.url}/v1/jobs").json()["jobs"]
    before = (out / "results.jsonl").read_bytes()
    again = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 to do, 4 skipped (already done)" in again.stdout
    assert httpx.get(f"{jobs_server.url}/v1/jobs").json()["jobs"] == jobs_before  # no job sent
    assert (out / "results.jsonl").read_bytes() == before

    # The server's records keep each line's word boxes, so `--format pdf` makes a searchable PDF
    # of each input from them with no job sent; poppler reads each page's text back.
    assert all(line["words"] for line in records[3]["lines"])
    pdf_run = subprocess.run(
        [*command, "--format", "pdf"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert pdf_run.returncode == 0, pdf_run.stdout + pdf_run.stderr
    assert httpx.get(f"{jobs_server.url}/v1/jobs").json()["jobs"] == jobs_before
    text = subprocess.run(
        ["pdftotext", str(out / "doc.pdf.pdf"), "-"], capture_output=True, text=True, check=True
    )
    pages = text.stdout.split("\f")[:-1]
    assert len(pages) == 3
    for page, record in zip(pages, records[:3], strict=True):
        assert cer("".join(t["text"] for t in record["lines"]), page) < 0.01


def test_job_survives_kill_9_and_every_page_appears_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    first = fresh_server(first_dir, jobs_config(str(data_dir), inflight=1) + ONE_SET)
    children: list[psutil.Process] = []
    try:
        wait_ready(first)
        response = _submit(first, [("a.pdf", PDF3), ("b.pdf", PDF3)])
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        follower = Follower(first, job_id)
        follower.start()
        assert follower.first.wait(timeout=120)
        before = httpx.get(f"{first.url}/v1/jobs/{job_id}").json()
        assert before["status"] == "running"
        assert 1 <= before["pages_done"] < 6
        children = psutil.Process(first.process.pid).children(recursive=True)
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(timeout=30)
    finally:
        kill_leftovers(first, children)
    follower.join(timeout=30)
    assert follower.error is not None  # the stream was cut by the kill

    second = fresh_server(second_dir, jobs_config(str(data_dir), inflight=1) + ONE_SET)
    try:
        wait_ready(second)
        with httpx.stream("GET", f"{second.url}/v1/jobs/{job_id}/results", timeout=300) as r:
            lines = [json.loads(ln) for ln in r.iter_lines() if ln]
        status = httpx.get(f"{second.url}/v1/jobs/{job_id}").json()
        assert status["status"] == "succeeded"
        assert (status["pages_done"], status["pages_failed"]) == (6, 0)
        keys = sorted((ln["file_index"], ln["page"]) for ln in lines)
        assert keys == [(f, p) for f in (0, 1) for p in (0, 1, 2)]
        texts = _texts(lines)
        for file in (0, 1):
            assert _pdf_ok([texts[(file, page)] for page in range(3)])
        results = data_dir / "jobs" / job_id / "results"
        assert sorted(p.name for p in results.glob("*.json")) == [f"{i}.json" for i in range(6)]
        # The page the killed server had in flight (one at a time here) was run again.
        reset = re.search(r"(\d+) pages left running set back to pending", second.log.read_text())
        assert reset is not None
        assert reset.group(1) == "1"
    finally:
        stop_server(second)
