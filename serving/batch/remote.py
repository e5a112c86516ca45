"""`ocr-batch --server URL`: submit the documents as one job and follow its results stream."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import httpx
from tqdm import tqdm

from serving.batch.manifest import BatchDocument, Manifest, PageKey

RECONNECTS = 30
"""Times the results stream is followed again after the connection drops (a server restart)."""
RECONNECT_WAIT_S = 2.0


class RemoteError(Exception):
    """The server refused the job, or it ended without its results."""


def run_remote(
    url: str,
    documents: list[BatchDocument],
    manifest: Manifest,
    progress: Callable[[int], tqdm[Any]],
    *,
    api_key: str | None = None,
) -> dict[PageKey, dict[str, Any]]:
    """Submit every document with a page not done yet, with `api_key` (`X-API-Key`) when the
    server wants one; record results as they stream in.

    The server takes whole files, so a document with some pages done is sent again; its pages
    already in the manifest are not recorded twice. Returns the pages that failed.
    """
    todo = [d for d in documents if not all(manifest.done(k) for k in d.page_keys())]
    failures: dict[PageKey, dict[str, Any]] = {}
    headers = {"X-API-Key": api_key} if api_key else {}
    with httpx.Client(
        base_url=url.rstrip("/"), timeout=httpx.Timeout(60.0, read=None), headers=headers
    ) as client:
        job = _submit(client, todo, manifest.options)
        seen: set[PageKey] = set()
        with progress(int(job["pages_total"])) as bar:
            for attempt in range(RECONNECTS + 1):
                try:
                    for record in _results(client, job["id"]):
                        doc = todo[int(record["file_index"])]
                        key = (doc.sha256, int(record["page"]))
                        if key in seen:
                            continue
                        seen.add(key)
                        _take(doc, key, record, manifest, failures)
                        bar.update(1)
                    break
                except httpx.TransportError as err:
                    if attempt == RECONNECTS:
                        raise RemoteError(f"lost the server: {err}") from err
                    bar.write(
                        f"ocr-batch: connection lost ({err}); following job {job['id']} again"
                    )
                    time.sleep(RECONNECT_WAIT_S)
        status = client.get(f"/v1/jobs/{job['id']}").json()
    if status.get("status") == "cancelled":
        raise RemoteError(f"job {job['id']} was cancelled on the server")
    return failures


def _submit(
    client: httpx.Client, documents: list[BatchDocument], options: dict[str, Any]
) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        files: list[tuple[str, tuple[str, IO[bytes], str]]] = [
            ("file", (doc.name, stack.enter_context(doc.path.open("rb")), _mime(doc)))
            for doc in documents
        ]
        data = {"options": json.dumps(options)} if options else {}
        response = client.post("/v1/jobs", files=files, data=data)
    if response.status_code != 202:
        raise RemoteError(
            f"the server refused the job ({response.status_code}): {_message(response)}"
        )
    job: dict[str, Any] = response.json()
    return job


def _results(client: httpx.Client, job_id: str) -> Iterator[dict[str, Any]]:
    with client.stream("GET", f"/v1/jobs/{job_id}/results") as response:
        if response.status_code != 200:
            response.read()
            raise RemoteError(f"cannot read job {job_id}'s results: {_message(response)}")
        for line in response.iter_lines():
            if line.strip():
                yield json.loads(line)


def _take(
    doc: BatchDocument,
    key: PageKey,
    record: dict[str, Any],
    manifest: Manifest,
    failures: dict[PageKey, dict[str, Any]],
) -> None:
    if "error" in record:
        failures[key] = record["error"]
    elif not manifest.done(key):
        kept = ("page", "width", "height", "lines", "orientation")
        fields: dict[str, Any] = {k: record[k] for k in kept if k in record}
        manifest.append(key, {"file": doc.name, "sha256": doc.sha256, **fields})


def _mime(doc: BatchDocument) -> str:
    return "application/pdf" if doc.kind == "pdf" else "application/octet-stream"


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]
