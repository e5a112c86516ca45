"""Issue 26.11 against a real `ocr-serve` (model-free device workers, a real PostgreSQL job store
whose URL carries `?password=`): security headers and no `Server`, the Host and Origin checks
with API keys off, `/readyz` detail for loopback callers only, a `%0a` in a path kept on its log
line, a bounded `logId`, and the store's password kept out of the log."""

from __future__ import annotations

import base64
import ipaddress
import socket
import time
import urllib.parse

import httpx
import pytest

from serving.http.security_headers import CONTENT_SECURITY_POLICY
from tests import images
from tests.e2e.conftest import Server
from tests.e2e.profiles import HARDENED_PASSWORD as PASSWORD

# Model-free; keys off on 0.0.0.0 with `auth.open`, a PostgreSQL job store whose URL carries
# PASSWORD (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("hardened")
PNG = base64.b64encode(images.encode_png(images.latin_lines().image)).decode()


def _non_loopback_address() -> str | None:
    """This machine's address on its default route, if it has one (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


def _port(server: Server) -> int:
    return int(server.url.rpartition(":")[2])


def test_every_answer_has_the_security_headers_and_no_server_header(server: Server) -> None:
    answers = [
        httpx.get(f"{server.url}/"),
        httpx.get(f"{server.url}/static/app.js"),
        httpx.get(f"{server.url}/livez"),
        httpx.get(f"{server.url}/no-such-page"),
        httpx.post(f"{server.url}/v1/ocr", content=b"not an image"),
        httpx.get(f"{server.url}/v1/jobs", headers={"Host": "rebind.example"}),
    ]
    assert [a.status_code for a in answers] == [200, 200, 200, 404, 415, 400]
    for answer in answers:
        assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert "server" not in answer.headers, answer.headers["server"]


def test_only_hosts_no_rebinding_page_can_send_are_answered(server: Server) -> None:
    refused = httpx.get(
        f"{server.url}/v1/jobs", headers={"Host": f"rebind.example:{_port(server)}"}
    )
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "host_not_allowed"
    assert error["request_id"] == refused.headers["x-request-id"]
    paddlex = httpx.post(
        f"{server.url}/ocr", headers={"Host": "rebind.example"}, json={"file": PNG, "fileType": 1}
    )
    assert (paddlex.status_code, paddlex.json()["errorCode"]) == (400, 400)
    for host in ("localhost", "127.0.0.1", "[::1]"):
        answer = httpx.get(f"{server.url}/v1/jobs", headers={"Host": f"{host}:{_port(server)}"})
        assert answer.status_code == 200, host
    address = _non_loopback_address()
    if address is not None:  # as the kubelet or `docker run -p` reach it: by IP
        assert httpx.get(f"http://{address}:{_port(server)}/v1/jobs").status_code == 200


def test_another_sites_form_post_is_refused_and_the_servers_own_page_is_not(
    server: Server,
) -> None:
    files = {"file": ("page.png", base64.b64decode(PNG), "image/png")}
    refused = httpx.post(
        f"{server.url}/v1/jobs", files=files, headers={"Origin": "https://evil.example"}
    )
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "cross_origin_refused"
    listed = httpx.get(f"{server.url}/v1/jobs").json()
    assert listed["jobs"] == []  # no job was made
    own = httpx.post(
        f"{server.url}/v1/ocr",
        content=base64.b64decode(PNG),
        headers={"Origin": server.url, "content-type": "image/png"},
    )
    assert own.status_code == 200


def test_readyz_shows_its_detail_to_loopback_callers_only(server: Server) -> None:
    local = httpx.get(f"{server.url}/readyz")
    assert local.status_code == 200
    assert all(isinstance(d["pid"], int) for d in local.json()["devices"].values())
    # Uvicorn takes X-Forwarded-For from 127.0.0.1 (a proxy on the machine): a remote client.
    proxied = httpx.get(f"{server.url}/readyz", headers={"X-Forwarded-For": "203.0.113.7"})
    assert (proxied.status_code, proxied.json()) == (200, {"ready": True})
    address = _non_loopback_address()
    if address is not None:
        remote = httpx.get(f"http://{address}:{_port(server)}/readyz")
        assert (remote.status_code, remote.json()) == (200, {"ready": True})


def test_a_newline_in_a_path_stays_on_its_log_line(server: Server) -> None:
    forged = "2026-12-04 00:00:00,000 INFO [main] - serving.access: GET / 200 0.1ms"
    answer = httpx.get(f"{server.url}/forged%0a{urllib.parse.quote(forged)}")
    assert answer.status_code == 404
    logged = f"GET /forged\\n{forged} 404"
    for _ in range(100):  # the access line is written as the answer goes out
        if logged in server.log.read_text():
            break
        time.sleep(0.1)
    lines = server.log.read_text().splitlines()
    assert any(logged in line for line in lines)
    assert not any(line.startswith(forged[:23]) for line in lines)


def test_log_id_is_echoed_only_when_short_and_printable(server: Server) -> None:
    for bad in ("x" * 129, "a\nINFO forged", "x" * 1_000_000):
        answer = httpx.post(f"{server.url}/ocr", json={"file": PNG, "fileType": 1, "logId": bad})
        assert answer.status_code == 422
        body = answer.json()
        assert body["logId"] == answer.headers["x-request-id"]
        assert "logId" in body["errorMsg"]
        assert len(answer.content) < 2000
    echoed = httpx.post(f"{server.url}/ocr", json={"file": "!!", "fileType": 1, "logId": "c-1"})
    assert (echoed.status_code, echoed.json()["logId"]) == (422, "c-1")


def test_the_job_stores_password_is_not_logged(server: Server) -> None:
    text = server.log.read_text()
    assert "password=***" in text  # the effective configuration's jobs.store
    assert PASSWORD not in text
