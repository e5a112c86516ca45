"""Two `ocr-serve` replicas sharing one PostgreSQL job store (a real server, tests/postgres.py) and
one uploads directory: a job sent to one is answered by the other, and when one is killed (-9)
mid-job the other takes over its leased pages and finishes the job, every page exactly once."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

from tests import images
from tests.e2e.conftest import (
    ONE_SET,
    Server,
    fresh_server,
    kill_leftovers,
    stop_server,
    wait_ready,
)
from tests.postgres import PostgresServer

LATIN = images.latin_lines()
LATIN_PNG = images.encode_png(LATIN.image)
PDF3 = images.make_pdf([LATIN.image, images.chinese_lines().image, LATIN.image], dpi=144.0)

LEASE_S = 3.0


def replica_config(data_dir: Path, url: str) -> str:
    return f"""
[server]
log_level = "info"
[paddlex]
visualize = false
[workers]
devices = ["cpu"]
cpu_workers = 1
[jobs]
data_dir = "{data_dir}"
store = "{url}"
lease_s = {LEASE_S}
poll_interval_s = 0.2
max_inflight_pages = 1
"""


def _start_replicas(tmp_path: Path, url: str) -> tuple[Server, Server]:
    """Two replicas, real models, one page in flight each; `shared` stands for the directory
    every replica mounts (the uploads)."""
    config = replica_config(tmp_path / "shared", url)
    servers = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        servers.append(fresh_server(tmp_path / name, config + ONE_SET))
    return servers[0], servers[1]


def _submit(server: Server, files: list[tuple[str, bytes]]) -> str:
    parts = [("file", (name, body, "application/octet-stream")) for name, body in files]
    response = httpx.post(f"{server.url}/v1/jobs", files=parts, timeout=60)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _pages(url: str, job_id: str) -> list[dict]:
    with psycopg.connect(url) as conn:
        cursor = conn.execute(
            "SELECT seq, status, attempts, lease_owner FROM ocr_pages WHERE job_id = %s"
            " ORDER BY seq",
            (job_id,),
        )
        columns = [c.name for c in cursor.description or ()]
        return [dict(zip(columns, row, strict=True)) for row in cursor]


def _held_by(pages: list[dict], server: Server) -> list[int]:
    """Pages running under a lease of `server`'s process (owner `host:pid:nonce`)."""
    pid = str(server.process.pid)
    return [
        p["seq"]
        for p in pages
        if p["status"] == "running" and (p["lease_owner"] or "").split(":")[1] == pid
    ]


def _kill_while_holding(victim: Server, url: str, job_id: str, timeout_s: float) -> list[int]:
    """kill -9 `victim` once it has a page done and holds leases; returns the pages it held.

    Frozen (SIGSTOP) first, so what it holds cannot change between the look and the kill.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pages = _pages(url, job_id)
        if any(p["status"] == "done" for p in pages) and _held_by(pages, victim):
            children = psutil.Process(victim.process.pid).children(recursive=True)
            os.kill(victim.process.pid, signal.SIGSTOP)
            time.sleep(0.3)  # a statement it sent just before completes (or not) meanwhile
            held = _held_by(_pages(url, job_id), victim)
            if not held:  # it committed its page just before the freeze: let it claim another
                os.kill(victim.process.pid, signal.SIGCONT)
                continue
            os.kill(victim.process.pid, signal.SIGKILL)
            victim.process.wait(timeout=30)
            kill_leftovers(victim, children)
            return held
        time.sleep(0.05)
    raise TimeoutError(f"replica never held a lease:\n{victim.log.read_text()[-3000:]}")


def _finish_on(server: Server, job_id: str) -> tuple[dict, list[dict]]:
    with httpx.stream("GET", f"{server.url}/v1/jobs/{job_id}/results", timeout=300) as response:
        assert response.status_code == 200
        lines = [json.loads(line) for line in response.iter_lines() if line]
    status = httpx.get(f"{server.url}/v1/jobs/{job_id}", timeout=30).json()
    return status, lines


@pytest.fixture
def store_url(postgres: PostgresServer) -> str:
    return postgres.database()


def test_replica_killed_mid_job_its_pages_taken_over_once(tmp_path: Path, store_url: str) -> None:
    """The embedded PP-OCRv5 models: a 3-page PDF twice, sent to one replica and answered by both;
    the first is killed (-9) holding a page, and the other finishes the job after the lease lapses,
    every page exactly once and with its text."""
    a, b = _start_replicas(tmp_path, store_url)
    try:
        wait_ready(a)
        wait_ready(b)
        job_id = _submit(a, [("a.pdf", PDF3), ("b.pdf", PDF3)])
        assert httpx.get(f"{b.url}/v1/jobs/{job_id}").json()["pages_total"] == 6
        held = _kill_while_holding(a, store_url, job_id, timeout_s=120)
        status, lines = _finish_on(b, job_id)
        assert status["status"] == "succeeded", status
        assert (status["pages_done"], status["pages_failed"]) == (6, 0)
        keys = sorted((line["file_index"], line["page"]) for line in lines)
        assert keys == [(f, p) for f in (0, 1) for p in (0, 1, 2)]
        texts = {(ln["file_index"], ln["page"]): [t["text"] for t in ln["lines"]] for ln in lines}
        for file in (0, 1):
            for page in (0, 2):  # the Latin pages (PDF's JPEG may cost a space, never a letter)
                found = [t.replace(" ", "") for t in texts[(file, page)]]
                assert found == [t.replace(" ", "") for t in LATIN.lines], texts[(file, page)]
        pages = _pages(store_url, job_id)
        assert [p["status"] for p in pages] == ["done"] * 6
        for seq in held:  # what the killed replica held was run again, by the other one
            assert pages[seq]["attempts"] >= 2, pages[seq]
    finally:
        kill_leftovers(a, [])
        stop_server(b)
