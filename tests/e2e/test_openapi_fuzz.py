"""Schemathesis against `/openapi.json` of a running `ocr-serve`: generated requests for every
operation, bounded and seeded, and not one 5xx answer but the 504 a client asks for with a
deadline (`X-Request-Timeout`) too short for its request."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Server

# The shipped models, small job limits (tests/e2e/profiles.py).
pytestmark = pytest.mark.profile("jobs-sqlite")

SEED = 20240518
MAX_EXAMPLES = 20
"""Generated cases per operation in the fuzzing phase (the coverage phase adds its own)."""


def test_spec_and_docs_are_served(server: Server) -> None:
    spec = httpx.get(f"{server.url}/openapi.json").json()
    for path in ("/ocr", "/v1/ocr", "/health", "/livez", "/readyz", "/metrics", "/v1/jobs"):
        assert path in spec["paths"]
    docs = httpx.get(f"{server.url}/docs")
    assert docs.status_code == 200
    assert "/static/docs.js" in docs.text


def test_no_server_errors_on_generated_requests(server: Server, tmp_path: Path) -> None:
    har = tmp_path / "requests.har"
    command = [
        str(Path(sys.executable).parent / "st"),
        "--config-file",
        str(tmp_path / "schemathesis.toml"),
        "run",
        f"{server.url}/openapi.json",
        "--checks",
        "not_a_server_error",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--no-shrink",
        "--request-timeout",
        "60",
        "--suppress-health-check",
        "all",
        "--report",
        "har",
        "--report-har-path",
        str(har),
    ]
    # A 504 is the answer to a client's own deadline; which requests got one is checked below.
    (tmp_path / "schemathesis.toml").write_text(
        '[checks.not_a_server_error]\nexpected-statuses = ["2xx", "3xx", "4xx", "504"]\n'
    )
    # tmp_path as the working directory keeps hypothesis' example database out of the repo.
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    entries = json.loads(har.read_text())["log"]["entries"] if har.exists() else []
    statuses = Counter(entry["response"]["status"] for entry in entries)
    operations = Counter(
        f"{entry['request']['method']} {httpx.URL(entry['request']['url']).path}"
        for entry in entries
    )
    print(f"schemathesis sent {len(entries)} requests; statuses {dict(sorted(statuses.items()))}")
    print(f"requests per path: {dict(operations.most_common(12))}")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert entries, run.stdout[-3000:]
    assert not [status for status in statuses if status >= 500 and status != 504]
    for entry in entries:
        if entry["response"]["status"] == 504:
            headers = {h["name"].lower(): h["value"] for h in entry["request"]["headers"]}
            assert float(headers["x-request-timeout"]) < 1.0, entry["request"]
    # The server is still healthy afterwards.
    assert httpx.get(f"{server.url}/readyz").status_code == 200
