"""Issue 37, items 8 and 10, against a real `ocr-serve`: a keyless server bound beyond loopback
refuses the jobs API (403 naming `auth.open`) and still serves OCR; CPU workers run without the
server's secrets (read from `/proc/<pid>/environ`) and under resource limits (`/proc/<pid>/limits`).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests import images
from tests.e2e.conftest import Server
from tests.e2e.profiles import POSTGRES_KEY as KEY
from tests.e2e.profiles import POSTGRES_PASSWORD as PASSWORD

PNG = images.encode_png(images.latin_lines().image)


@pytest.fixture
def open_bind(server: Server) -> Server:
    """Model-free, keyless, bound to 0.0.0.0 (tests/e2e/profiles.py)."""
    return server


@pytest.mark.profile("open-bind")
def test_keyless_server_on_the_network_refuses_the_jobs_api(open_bind: Server) -> None:
    for answer in (
        httpx.get(f"{open_bind.url}/v1/jobs"),
        httpx.post(f"{open_bind.url}/v1/jobs", files=[("file", ("a.png", PNG, "image/png"))]),
        httpx.delete(f"{open_bind.url}/v1/jobs/whatever"),
    ):
        assert answer.status_code == 403, answer.text
        error = answer.json()["error"]
        assert error["code"] == "open_store_refused"
        assert "auth.open" in error["message"]
    # What stores nothing is served, and the server goes on serving.
    ocr = httpx.post(f"{open_bind.url}/v1/ocr", content=PNG, headers={"content-type": "image/png"})
    assert ocr.status_code == 200, ocr.text
    assert httpx.get(f"{open_bind.url}/livez").status_code == 200
    log = open_bind.log.read_text()
    assert "jobs API refused (403 open_store_refused)" in log
    assert "auth.open = true" in log


@pytest.fixture
def keyed(server: Server) -> Server:
    """Model-free, with an API key, a job store URL with a password and a cloud token in its
    environment (tests/e2e/profiles.py)."""
    return server


def _cpu_worker_pids(server: Server) -> list[int]:
    ready = httpx.get(f"{server.url}/readyz").json()  # loopback: the detail
    pids = ready["cpu_workers"]["pids"]
    assert pids, json.dumps(ready)
    return [int(pid) for pid in pids]


def _limits(pid: int) -> dict[str, str]:
    """`/proc/<pid>/limits` as name -> soft limit."""
    rows = Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]
    return {row[:26].strip(): row[26:].split()[0] for row in rows}


@pytest.mark.profile("jobs-postgres")
def test_cpu_workers_hold_no_secret(keyed: Server) -> None:
    main = Path(f"/proc/{keyed.process.pid}/environ").read_bytes()
    assert KEY.encode() in main  # the test's secrets did reach the server
    for pid in _cpu_worker_pids(keyed):
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        names = {entry.partition(b"=")[0] for entry in environ.split(b"\0") if entry}
        assert KEY.encode() not in environ
        assert PASSWORD.encode() not in environ
        assert b"cloud-secret" not in environ
        assert not {name for name in names if name.startswith(b"OCR_")}, names
        assert b"PATH" in names
        assert b"OPENCV_IO_MAX_IMAGE_PIXELS" in names  # what the decoders need, kept


@pytest.mark.profile("jobs-postgres")
def test_cpu_workers_run_under_limits(keyed: Server) -> None:
    for pid in _cpu_worker_pids(keyed):
        limits = _limits(pid)
        assert limits["Max open files"] == "256"
        assert limits["Max core file size"] == "0"
        assert limits["Max address space"] != "unlimited"
        assert int(limits["Max address space"]) >= 2 << 30
        assert limits["Max cpu time"] != "unlimited"
    # Under those limits the workers still do their work.
    answer = httpx.post(
        f"{keyed.url}/v1/ocr",
        content=PNG,
        headers={"content-type": "image/png", "X-API-Key": KEY},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["pages"]
