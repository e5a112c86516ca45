"""A finished job's outputs written to object storage, the outbox's exporter
(`serving.jobs.outbox`): `results.jsonl` (every page in document order, each line as `GET
/v1/jobs/{id}/results` gives it) and each document in each format the job asked for, rendered as
its download is (`serving.http.job_documents.rendered`: a CPU worker, within the memory budget),
then written from its file in parts, the budget holding the transfer's buffer
(`serving.jobs.storage.s3.TRANSFER_BYTES`). A document that cannot be rendered is written as
`NAME.EXT.error.json` instead (under an `s3://` prefix; a presigned URL gets nothing), as the
archive does; the store's refusals end the export (`serving.jobs.storage.errors`)."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from serving.config import StorageConfig
from serving.errors import OcrError
from serving.http.job_documents import document_states, rendered
from serving.jobs.credentials import Credentials
from serving.jobs.hooks import RESULTS_NAME, output_names
from serving.jobs.runner import JobRunner
from serving.jobs.storage.outputs import OutputSink, open_sink
from serving.jobs.storage.s3 import TRANSFER_BYTES
from serving.jobs.store.types import JobInfo
from serving.metrics import Metrics
from serving.outputs.formats import MEDIA_TYPES
from serving.service.requests import JobRequests

REPORTED_OBJECTS = 100
"""Objects a job's event lists by name (all are counted)."""


class JobExporter:
    """Writes ended jobs' outputs where their hooks say."""

    def __init__(
        self, jobs: JobRequests, storage: StorageConfig, metrics: Metrics | None = None
    ) -> None:
        self._jobs = jobs
        self._storage = storage
        self._metrics = metrics

    async def __call__(self, info: JobInfo, credentials: Credentials) -> dict[str, Any]:
        """Export `info`'s outputs; returns the report its event carries.

        Raises:
            StorageDenied, StorageNotFound, StorageRefused, StorageNotConfigured: no retry
                helps. StorageUnavailable: try again later.
        """
        runner = self._jobs.runner
        if runner is None:
            raise OcrError("This server serves no jobs")
        sink = open_sink(info.hooks, credentials, self._storage)
        written: list[str] = []
        errors: list[dict[str, Any]] = []
        if sink.wants(RESULTS_NAME):
            path = await asyncio.to_thread(_write_results, runner, info.id)
            written.append(await self._put(sink, RESULTS_NAME, path, "application/x-ndjson"))
        states = await document_states(runner.store, info)
        for fmt in info.hooks.output_formats:
            names = output_names([state.file.name for state in states], fmt)
            for state, name in zip(states, names, strict=True):
                if not sink.wants(name):
                    continue
                try:
                    path = await rendered(self._jobs, runner, info.id, state, fmt)
                except OcrError as err:  # this document only: said in its place
                    errors.append({"name": name, "code": err.code, "message": err.message})
                    if sink.wants(f"{name}.error.json"):
                        path = await asyncio.to_thread(_write_error, runner, info.id, name, err)
                        written.append(
                            await self._put(sink, f"{name}.error.json", path, "application/json")
                        )
                    continue
                written.append(await self._put(sink, name, path, MEDIA_TYPES[fmt]))
        report: dict[str, Any] = {
            "location": sink.location,
            "count": len(written),
            "objects": written[:REPORTED_OBJECTS],
        }
        if errors:
            report["errors"] = errors[:REPORTED_OBJECTS]
        return report

    async def _put(self, sink: OutputSink, name: str, path: Path, media_type: str) -> str:
        try:
            async with self._jobs.budget.hold(TRANSFER_BYTES):
                where = await sink.put(name, path, media_type)
        except OcrError:
            self._count("failed")
            raise
        self._count("ok")
        return where

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.storage_objects.labels(direction="write", outcome=outcome).inc()


def _outputs(runner: JobRunner, job_id: str) -> Path:
    path = runner.store.job_dir(job_id) / "outputs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_results(runner: JobRunner, job_id: str) -> Path:
    """Every finished page's line in document order (a failed page's error line in its place;
    pages a cancelled job never ran are left out), into the job's outputs; returns the file."""
    _, finished = runner.store.finished_pages(job_id)
    pages = sorted(finished, key=lambda page: page.seq)
    dest = _outputs(runner, job_id) / RESULTS_NAME
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as file:
        for page in pages:
            if page.error is not None:
                line = json.dumps(page.error.to_json(), ensure_ascii=False).encode()
            else:
                line = runner.store.read_result(job_id, page.seq)
            file.write(line + b"\n")
    os.replace(tmp, dest)
    return dest


def _write_error(runner: JobRunner, job_id: str, name: str, err: OcrError) -> Path:
    dest = _outputs(runner, job_id) / f".{uuid.uuid4().hex}.error.json"
    body = {"name": name, "error": {"code": err.code, "message": err.message}}
    dest.write_bytes(json.dumps(body, ensure_ascii=False).encode())
    return dest
