"""How much a large batch job slows interactive `/ocr`: p95 at concurrency 2, without and with.

Run by `make bench` (unless --skip-job-impact): the same server serves a closed-loop `/ocr` load
twice, first alone, then while a job of many pages runs at background priority.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from loadtest.documents import Document
from loadtest.run import run_level
from loadtest.servers import ServerProcess


async def _submit_job(url: str, paths: Sequence[Path], copies: int) -> str:
    files = [
        ("file", (f"{i}-{p.name}", p.read_bytes(), "image/png"))
        for i in range(copies)
        for p in paths
    ]
    async with httpx.AsyncClient(timeout=600) as client:
        response = await client.post(f"{url}/v1/jobs", files=files)
        response.raise_for_status()
        job_id: str = response.json()["id"]
        return job_id


async def _job_status(url: str, job_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.get(f"{url}/v1/jobs/{job_id}")
        response.raise_for_status()
        status: dict[str, Any] = response.json()
        return status


def measure(
    server: ServerProcess,
    documents: Sequence[Document],
    page_paths: Sequence[Path],
    *,
    requests: int,
    job_copies: int,
    max_time_s: float,
) -> dict[str, Any]:
    """p50/p95 of `/ocr` at concurrency 2 alone, then beside a job of `job_copies` x the pages."""

    def level() -> dict[str, Any]:
        result = asyncio.run(
            run_level(
                server.url,
                "paddlex",
                documents,
                concurrency=2,
                requests=requests,
                warmup=2,
                timeout_s=600,
                max_time_s=max_time_s,
            )
        )
        return {
            "p50_s": result.p50_s,
            "p95_s": result.p95_s,
            "pages_per_s": result.throughput_pages_s,
            "errors": result.errors,
        }

    alone = level()
    job_id = asyncio.run(_submit_job(server.url, page_paths, job_copies))
    started = time.monotonic()
    with_job = level()
    status = asyncio.run(_job_status(server.url, job_id))
    with_job["job_pages_done_meanwhile"] = status["pages_done"]
    with_job["job_pages_total"] = status["pages_total"]
    with_job["seconds"] = round(time.monotonic() - started, 1)
    asyncio.run(_cancel(server.url, job_id))
    return {"alone": alone, "with_job": with_job}


async def _cancel(url: str, job_id: str) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        await client.delete(f"{url}/v1/jobs/{job_id}")
