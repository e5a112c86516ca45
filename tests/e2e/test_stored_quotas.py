"""What a key may keep in the job store, and its share of the job slots, on `ocr-serve` (issue 37,
item 5): a key at its `max_jobs` gets 429 `stored_quota_exceeded` before its upload is read, other
keys are served, and deleting a job makes room; an upload the disk cannot take gets 507 before a
byte is read; a key with three jobs gets no more of the slots than a key with one."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import httpx
import pytest

from tests import images
from tests.e2e.conftest import Server
from tests.e2e.profiles import QUOTA_KEYS as SECRETS

PNG = images.encode_png(images.latin_lines().image)


def _free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def _submit(server: Server, key_id: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/jobs",
        files=[("file", ("page.png", PNG, "image/png"))],
        headers={"X-API-Key": SECRETS[key_id]},
        timeout=60,
    )


# A one-worker server on the slow fake (0.2 s a batch, two job slots) with keys `tiny` (one job at
# most), `roomy`, `many` and `one`, and more room for uploads than the disk has
# (tests/e2e/profiles.py).
@pytest.mark.profile("quotas")
def test_a_key_at_its_job_quota_gets_429_until_it_deletes_one(server: Server) -> None:
    first = _submit(server, "tiny")
    assert first.status_code == 202, first.text

    refused = _submit(server, "tiny")
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "stored_quota_exceeded"
    assert "1 jobs of key tiny" in error["message"]
    assert "max_jobs" in error["message"]
    assert "Retry-After" in refused.headers

    assert _submit(server, "roomy").status_code == 202  # another key is served

    deleted = httpx.delete(
        f"{server.url}/v1/jobs/{first.json()['id']}",
        headers={"X-API-Key": SECRETS["tiny"]},
        timeout=30,
    )
    assert deleted.status_code == 200
    assert _submit(server, "tiny").status_code == 202


@pytest.mark.profile("quotas")
def test_an_upload_the_disk_cannot_take_gets_507_before_its_body(
    server: Server, tmp_path: Path
) -> None:
    """The head declares twice the disk's free space; the answer comes without a body byte."""
    declared = 2 * _free_bytes(tmp_path)
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            (
                f"POST /v1/jobs HTTP/1.1\r\nHost: {host}\r\n"
                f"X-API-Key: {SECRETS['roomy']}\r\n"
                "Content-Type: multipart/form-data; boundary=b\r\n"
                f"Content-Length: {declared}\r\n\r\n"
            ).encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 507 "), head
    error = json.loads(body)["error"]
    assert error["code"] == "insufficient_storage"
    assert "jobs.min_free_disk_bytes" in error["message"]
    assert _submit(server, "roomy").status_code == 202  # and the server goes on


@pytest.fixture
def slow_server(server: Server) -> Server:
    """Two job slots, and pages slowed (a fake device batch takes 0.2 s) so that jobs overlap."""
    return server


@pytest.mark.profile("quotas")
def test_a_key_with_three_jobs_gets_no_more_slots_than_a_key_with_one(slow_server: Server) -> None:
    pdf = images.make_pdf([images.latin_lines().image] * 4, dpi=72.0)

    def submit(key_id: str) -> str:
        response = httpx.post(
            f"{slow_server.url}/v1/jobs",
            files=[("file", ("four.pdf", pdf, "application/pdf"))],
            headers={"X-API-Key": SECRETS[key_id]},
            timeout=60,
        )
        assert response.status_code == 202, response.text
        job_id: str = response.json()["id"]
        return job_id

    many = [submit("many") for _ in range(3)]  # keys of their own, with no job quota
    one = submit("one")
    # Follow the lone key's job to its end, then count the other key's pages done by then.
    followed = httpx.get(
        f"{slow_server.url}/v1/jobs/{one}/results?follow=true",
        headers={"X-API-Key": SECRETS["one"]},
        timeout=300,
    )
    assert len(followed.text.splitlines()) == 4
    done = sum(
        httpx.get(
            f"{slow_server.url}/v1/jobs/{job_id}",
            headers={"X-API-Key": SECRETS["many"]},
            timeout=30,
        ).json()["pages_done"]
        for job_id in many
    )
    # Shared between keys: about 4 of many's 12 pages ran beside one's 4, and a page or two more
    # as the count is read (5 measured). Shared between jobs, as before, one's job had a quarter
    # of the slots and ended with many's last (12 measured).
    assert done <= 8, done
