"""Jobs with object storage (issue 50, item 2) against a real S3-compatible server, SeaweedFS
(tests/s3.py), through boto3: a job reads its pages from `s3://` and writes its results and
documents there; presigned GET and PUT URLs do the same without credentials; wrong credentials
(403) and a missing key (404) are clear errors at submit, a store that refuses the export is a
clear error on the job, and the server serves on; `ocr-batch` reads and writes `s3://`. One
server on the model-free fake (the models do not matter here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from serving.http.keys import hash_key
from tests import images
from tests.e2e.conftest import SLOW_FAKE, Server, fresh_serving
from tests.s3 import BUCKET, SeaweedServer

KEYS = {
    "writer": "writer-1a2b3c4d5e6f",
    "reader": "reader-6f5e4d3c2b1a",
    "stranger": "stranger-0a9b8c7d6e5f",
}
PNG = images.encode_png(images.latin_lines().image)
REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def pages(seaweedfs: SeaweedServer) -> str:
    """Two one-page documents under a fresh prefix; returns `s3://bucket/prefix/`."""
    prefix = f"in-{uuid.uuid4().hex[:8]}/"
    client = seaweedfs.client()
    second = images.encode_png(images.chinese_lines().image)  # another file: ocr-batch hashes
    for name, body in (("page0.png", PNG), ("page1.png", second)):
        client.put_object(Bucket=BUCKET, Key=prefix + name, Body=body, ContentType="image/png")
    return f"s3://{BUCKET}/{prefix}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, seaweedfs: SeaweedServer) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("object-storage")
    writer, reader = seaweedfs.writer, seaweedfs.reader
    identities = {"writer": writer, "reader": reader, "stranger": (writer[0], "not-the-secret")}
    entries = "".join(
        f'[[keys]]\nid = "{name}"\nsha256 = "{hash_key(KEYS[name])}"\n'
        f's3_access_key_id = "{key}"\ns3_secret_access_key = "{secret}"\n'
        for name, (key, secret) in identities.items()
    )
    (tmp / "keys.toml").write_text(entries)
    (tmp / "s3.toml").write_text(
        f'access_key_id = "{writer[0]}"\nsecret_access_key = "{writer[1]}"\n'
    )
    config = f"""
[server]
max_body_bytes = 8000000
[paddlex]
visualize = false
[auth]
keys_file = "{tmp / "keys.toml"}"
[workers]
devices = ["cpu"]
cpu_workers = 1
cpu_instances = 1
[jobs]
data_dir = "{tmp / "data"}"
[webhooks]
retry_first_s = 0.3
retry_max_interval_s = 1.0
[storage]
s3_endpoint_url = "{seaweedfs.endpoint}"
s3_addressing_style = "path"
s3_credentials_file = "{tmp / "s3.toml"}"
url_allowed_hosts = ["127.0.0.1"]
allow_private_addresses = true
transfer_timeout_s = 30.0
"""
    with fresh_serving(tmp, config, backend=SLOW_FAKE) as srv:
        yield srv


def _submit(server: Server, key: str, *, files: int = 0, **fields: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/jobs",
        files=[("file", (f"up{i}.png", PNG, "image/png")) for i in range(files)] or None,
        data=fields,
        headers={"X-API-Key": KEYS[key]},
        timeout=120,
    )


def _form(server: Server, key: str, fields: list[tuple[str, str]]) -> httpx.Response:
    """A submit with repeated text fields only (multipart, as the API takes them)."""
    return httpx.post(
        f"{server.url}/v1/jobs",
        files=[(name, (None, value)) for name, value in fields],
        headers={"X-API-Key": KEYS[key]},
        timeout=120,
    )


def _exported(server: Server, key: str, job_id: str) -> dict[str, Any]:
    """The job once its export is over (delivered or failed)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        body: dict[str, Any] = httpx.get(
            f"{server.url}/v1/jobs/{job_id}", headers={"X-API-Key": KEYS[key]}
        ).json()
        exports = [d for d in body.get("deliveries", []) if d["kind"] == "export"]
        if exports and exports[0]["status"] != "pending":
            return body
        time.sleep(0.2)
    raise TimeoutError(json.dumps(body))


def _objects(seaweedfs: SeaweedServer, prefix: str) -> dict[str, bytes]:
    client = seaweedfs.client()
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {
        item["Key"][len(prefix) :]: client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
        for item in listed
    }


def test_a_job_reads_two_pages_from_s3_and_writes_its_results_there(
    server: Server, seaweedfs: SeaweedServer, pages: str
) -> None:
    out = f"out-{uuid.uuid4().hex[:8]}/"
    answer = _form(
        server,
        "writer",
        [("input", pages), ("output", f"s3://{BUCKET}/{out}"), ("output_formats", "json,text")],
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["pages_total"] == 2
    job = _exported(server, "writer", answer.json()["id"])
    assert job["status"] == "succeeded"
    assert [f["name"] for f in job["files"]] == ["page0.png", "page1.png"]
    export = job["deliveries"][0]
    assert (export["kind"], export["status"], export["attempts"]) == ("export", "delivered", 1)
    written = _objects(seaweedfs, out)
    assert sorted(written) == [
        "page0.png.json",
        "page0.png.txt",
        "page1.png.json",
        "page1.png.txt",
        "results.jsonl",
    ]
    lines = [json.loads(line) for line in written["results.jsonl"].splitlines()]
    assert [(line["file"], line["page"]) for line in lines] == [("page0.png", 0), ("page1.png", 0)]
    assert json.loads(written["page1.png.json"])["name"] == "page1.png"
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'ocr_storage_objects_total{direction="read",outcome="ok"}' in metrics
    assert _value(metrics, 'ocr_storage_objects_total{direction="write",outcome="ok"}') >= 5
    assert _value(metrics, 'ocr_deliveries_total{kind="export",outcome="delivered"}') >= 1


def test_wrong_credentials_and_a_missing_key_are_clear_errors_and_the_server_serves_on(
    server: Server, pages: str
) -> None:
    denied = _form(server, "stranger", [("input", pages)])
    assert denied.status_code == 422, denied.text
    error = denied.json()["error"]
    assert error["code"] == "storage_access_denied"
    assert pages in error["message"]
    assert "403" in error["message"]

    missing = _form(server, "writer", [("input", pages + "missing.png")])
    assert missing.status_code == 422, missing.text
    assert missing.json()["error"]["code"] == "storage_not_found"
    assert "404" in missing.json()["error"]["message"]
    assert pages + "missing.png" in missing.json()["error"]["message"]

    empty = _form(server, "writer", [("input", f"s3://{BUCKET}/nothing-here/")])
    assert empty.json()["error"]["code"] == "storage_not_found"

    # The reader may read but not write: its job runs, its export fails once and for all.
    answer = _form(server, "reader", [("input", pages), ("output", f"s3://{BUCKET}/denied/")])
    assert answer.status_code == 202, answer.text
    job = _exported(server, "reader", answer.json()["id"])
    assert job["status"] == "succeeded"
    export = job["deliveries"][0]
    assert (export["status"], export["attempts"]) == ("failed", 1)
    assert "access denied" in export["last_error"]
    assert "403" in export["last_error"]

    # A bucket that does not exist: the export is not found, once.
    answer = _submit(server, "writer", files=1, output="s3://no-such-bucket-here/out/")
    job = _exported(server, "writer", answer.json()["id"])
    assert job["deliveries"][0]["status"] == "failed"
    assert "404" in job["deliveries"][0]["last_error"]

    assert httpx.get(f"{server.url}/livez").status_code == 200
    again = _submit(server, "writer", files=1)
    assert again.status_code == 202, again.text


def test_presigned_urls_read_the_input_and_take_the_outputs(
    server: Server, seaweedfs: SeaweedServer, pages: str
) -> None:
    client = seaweedfs.client()
    prefix = pages.removeprefix(f"s3://{BUCKET}/")
    get = client.generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": prefix + "page0.png"}, ExpiresIn=600
    )
    out = f"presigned-{uuid.uuid4().hex[:8]}/"
    puts = {
        name: client.generate_presigned_url(
            "put_object", Params={"Bucket": BUCKET, "Key": out + name}, ExpiresIn=600
        )
        for name in ("results.jsonl", "page0.png.json")
    }
    unknown = _form(
        server, "reader", [("input", get), ("output_urls", json.dumps({"other.pdf": get}))]
    )
    assert unknown.status_code == 422, unknown.text
    assert "'other.pdf'" in unknown.json()["error"]["message"]

    answer = _form(server, "reader", [("input", get), ("output_urls", json.dumps(puts))])
    assert answer.status_code == 202, answer.text
    job = _exported(server, "reader", answer.json()["id"])
    assert job["deliveries"][0]["status"] == "delivered", job["deliveries"]
    assert "X-Amz-Signature" not in json.dumps(job)  # a presigned URL's signature is not shown
    written = _objects(seaweedfs, out)
    assert sorted(written) == ["page0.png.json", "results.jsonl"]
    assert json.loads(written["results.jsonl"])["file"] == "page0.png"


def test_ocr_batch_reads_and_writes_s3_and_a_rerun_skips_what_is_done(
    server: Server, seaweedfs: SeaweedServer, pages: str
) -> None:
    config = server.log.parent / "config.toml"
    out = f"s3://{BUCKET}/batch-{uuid.uuid4().hex[:8]}/"
    command = [
        sys.executable,
        "-m",
        "serving.batch.cli",
        pages,
        "--out",
        out,
        "--server",
        server.url,
        "--config",
        str(config),
        "--quiet",
    ]
    env = {**os.environ, "OCR_API_KEY": KEYS["writer"]}
    first = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 documents, 2 pages: 2 to do" in first.stdout
    assert f"to {out}" in first.stdout
    written = _objects(seaweedfs, out.removeprefix(f"s3://{BUCKET}/"))
    assert {"results.jsonl", "manifest.jsonl"} <= set(written)
    lines = [json.loads(line) for line in written["results.jsonl"].splitlines()]
    assert sorted(line["file"] for line in lines) == ["page0.png", "page1.png"]

    again = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 to do, 2 skipped" in again.stdout


def _value(metrics: str, series: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in /metrics")
