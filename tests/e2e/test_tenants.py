"""API keys as tenants on `ocr-serve` (issue 26.3): jobs are their key's, quotas answer 429 with
`Retry-After`, and `/metrics` counts requests per key id, never a secret."""

from __future__ import annotations

import concurrent.futures
import time

import httpx
import pytest

from serving.http.keys import plain_key_id
from tests import images
from tests.e2e.conftest import Server
from tests.e2e.profiles import PLAIN_KEY as PLAIN
from tests.e2e.profiles import TENANTS as SECRETS

# Named keys (root an admin, slow one request in 1000 s, narrow one page in flight) and the plain
# key PLAIN from `OCR_API_KEYS` (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("keys")
LATIN = images.latin_lines().image
PNG = images.encode_png(LATIN)
PDF3 = images.make_pdf([LATIN, LATIN, LATIN], dpi=144.0)


@pytest.fixture
def tenants_server(server: Server) -> Server:
    return server


def _as(key_id: str) -> dict[str, str]:
    return {"X-API-Key": SECRETS[key_id]}


def _submit(server: Server, key_id: str) -> str:
    response = httpx.post(
        f"{server.url}/v1/jobs",
        files=[("file", ("page.png", PNG, "image/png"))],
        headers=_as(key_id),
        timeout=60,
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


def _listed(server: Server, key_id: str) -> set[str]:
    response = httpx.get(f"{server.url}/v1/jobs", headers=_as(key_id), timeout=30)
    assert response.status_code == 200
    return {job["id"] for job in response.json()["jobs"]}


def test_a_job_is_its_keys_other_users_get_404_and_admins_see_every_job(
    tenants_server: Server,
) -> None:
    url = tenants_server.url
    mine = _submit(tenants_server, "alice")
    theirs = _submit(tenants_server, "bob")
    job = f"{url}/v1/jobs/{mine}"

    # bob cannot list, read, stream, cancel or delete alice's job: 404, as if it did not exist.
    assert _listed(tenants_server, "bob") == {theirs}
    for method, path in [
        ("GET", job),
        ("GET", f"{job}/results?follow=false"),
        ("GET", f"{job}/results?follow=false&format=text"),
        ("POST", f"{job}/cancel"),
        ("DELETE", job),
    ]:
        answer = httpx.request(method, path, headers=_as("bob"), timeout=30)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["error"]["code"] == "job_not_found"

    # Its owner still has it, untouched by bob's tries.
    assert _listed(tenants_server, "alice") == {mine}
    info = httpx.get(job, headers=_as("alice"), timeout=30).json()
    assert info["owner"] == "alice"
    assert info["status"] != "cancelled"
    results = httpx.get(f"{job}/results?follow=true", headers=_as("alice"), timeout=300)
    assert results.status_code == 200
    assert len(results.text.splitlines()) == 1  # its one page, once the job ran

    # An admin sees and may manage every job; a plain key is a user with a hashed id.
    assert {mine, theirs} <= _listed(tenants_server, "root")
    assert httpx.get(job, headers=_as("root"), timeout=30).status_code == 200
    plain = {"X-API-Key": PLAIN}
    listed = httpx.get(f"{url}/v1/jobs", headers=plain, timeout=30).json()["jobs"]
    assert listed == []
    assert httpx.get(job, headers=plain, timeout=30).status_code == 404

    assert httpx.post(f"{job}/cancel", headers=_as("alice"), timeout=30).status_code == 200
    assert httpx.delete(job, headers=_as("alice"), timeout=30).status_code == 200
    assert httpx.get(job, headers=_as("alice"), timeout=30).status_code == 404
    assert (
        httpx.delete(f"{url}/v1/jobs/{theirs}", headers=_as("root"), timeout=30).status_code == 200
    )
    assert httpx.get(f"{url}/v1/jobs/{theirs}", headers=_as("bob"), timeout=30).status_code == 404


def test_a_key_past_its_rate_gets_429_with_retry_after(tenants_server: Server) -> None:
    url = tenants_server.url
    first = httpx.get(f"{url}/v1/jobs", headers=_as("slow"), timeout=30)
    assert first.status_code == 200
    refused = httpx.get(f"{url}/v1/jobs", headers=_as("slow"), timeout=30)
    assert refused.status_code == 429
    assert 900 <= int(refused.headers["retry-after"]) <= 1000
    assert refused.json()["error"]["code"] == "quota_exceeded"
    paddlex = httpx.post(f"{url}/ocr", json={"file": "x", "fileType": 1}, headers=_as("slow"))
    assert paddlex.status_code == 429
    assert paddlex.json()["errorCode"] == 429
    # Other keys keep their own budget.
    assert httpx.get(f"{url}/v1/jobs", headers=_as("alice"), timeout=30).status_code == 200


def test_a_key_at_its_pages_in_flight_gets_429_and_other_keys_do_not(
    tenants_server: Server,
) -> None:
    url = tenants_server.url
    ocr = f"{url}/v1/ocr"
    pdf = {"content-type": "application/pdf"}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # narrow's only request is taken whatever its pages (3, over its cap of 1) ...
        first = pool.submit(httpx.post, ocr, content=PDF3, headers=pdf | _as("narrow"), timeout=300)
        while httpx.get(f"{url}/readyz", timeout=30).json()["admission"]["inflight_pages"] < 3:
            assert not first.done(), first.result().text
            time.sleep(0.05)
        # ... and holds them until it is answered: a second one of narrow's is refused at once.
        png = {"content-type": "image/png"}
        refused = httpx.post(ocr, content=PNG, headers=png | _as("narrow"), timeout=60)
        other = httpx.post(ocr, content=PNG, headers=png | _as("alice"), timeout=300)
        assert first.result().status_code == 200
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert "pages of key narrow in flight" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) > 0
    assert other.status_code == 200
    again = httpx.post(ocr, content=PNG, headers=png | _as("narrow"), timeout=300)
    assert again.status_code == 200  # its pages were given back


def test_metrics_count_requests_per_key_id_never_a_secret(tenants_server: Server) -> None:
    url = tenants_server.url
    httpx.get(f"{url}/v1/jobs", headers={"X-API-Key": PLAIN}, timeout=30)
    httpx.get(f"{url}/v1/jobs", headers={"X-API-Key": "not-a-key"}, timeout=30)
    httpx.get(f"{url}/v1/jobs/{'0' * 32}", headers=_as("bob"), timeout=30)
    for _ in range(2):  # the second at the latest is over the 1-request burst
        httpx.get(f"{url}/v1/jobs", headers=_as("slow"), timeout=30)
    # Open /metrics (the default) names no tenant (issue 37, item 13), nor does it to a user key;
    # an admin key sees the per-key series.
    for headers in ({}, {"X-API-Key": PLAIN}):
        hidden = httpx.get(f"{url}/metrics", headers=headers, timeout=30).text
        assert "ocr_requests_total{" in hidden
        assert "ocr_key_requests_total{" not in hidden
    text = httpx.get(f"{url}/metrics", headers=_as("root"), timeout=30).text
    assert f'ocr_key_requests_total{{key="{plain_key_id(PLAIN)}",status="200"}}' in text
    assert 'ocr_key_requests_total{key="-",status="401"}' in text
    assert 'ocr_key_requests_total{key="bob",status="404"}' in text
    assert 'ocr_key_requests_total{key="slow",status="429"}' in text
    log = tenants_server.log.read_text()
    for secret in [*SECRETS.values(), PLAIN, "not-a-key"]:
        assert secret not in text
        assert secret not in log
