"""How much a large batch job slows interactive `/ocr`, and how much a busy server lets it do.

`measure`, run by `make bench` (unless --skip-job-impact): the same server serves a closed-loop
`/ocr` load at concurrency 2 twice, first alone, then while a job of many pages runs at
background priority.

`python -m loadtest.bench.job_impact`: the jobs' share (`jobs.min_share`) side by side. For each
share, a server of its own serves `/v1/ocr` at a concurrency that keeps every device busy while a
job of the bench's pages runs beside it; the requests' figures and the job pages done meanwhile:

    python -m loadtest.bench.job_impact --min-shares 0,0.1 --concurrency 4 --requests 96
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from loadtest.client import Api
from loadtest.documents import Document, load_documents
from loadtest.engine_limit import real_page_set, write_page_set
from loadtest.run import run_level
from loadtest.servers import OURS_CPU_TOML, ServerProcess, start_ours


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
    alone = _closed_loop(server, "paddlex", documents, 2, requests, max_time_s)
    job_id = asyncio.run(_submit_job(server.url, page_paths, job_copies))
    started = time.monotonic()
    with_job = _closed_loop(server, "paddlex", documents, 2, requests, max_time_s)
    status = asyncio.run(_job_status(server.url, job_id))
    with_job["job_pages_done_meanwhile"] = status["pages_done"]
    with_job["job_pages_total"] = status["pages_total"]
    with_job["seconds"] = round(time.monotonic() - started, 1)
    asyncio.run(_cancel(server.url, job_id))
    return {"alone": alone, "with_job": with_job}


def _closed_loop(
    server: ServerProcess,
    api: Api,
    documents: Sequence[Document],
    concurrency: int,
    requests: int,
    max_time_s: float,
) -> dict[str, Any]:
    """One closed-loop level (as many warm-up requests as clients): pages/s, p50, p95, errors."""
    result = asyncio.run(
        run_level(
            server.url,
            api,
            documents,
            concurrency=concurrency,
            requests=requests,
            warmup=concurrency,
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


async def _cancel(url: str, job_id: str) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        await client.delete(f"{url}/v1/jobs/{job_id}")


def beside_busy_requests(
    server: ServerProcess,
    documents: Sequence[Document],
    page_paths: Sequence[Path],
    *,
    concurrency: int,
    requests: int,
    job_copies: int,
    max_time_s: float,
) -> dict[str, Any]:
    """A job of `job_copies` x the pages submitted, then `/v1/ocr` at `concurrency`: the
    requests' figures and the job's pages done by the end."""
    job_id = asyncio.run(_submit_job(server.url, page_paths, job_copies))
    started = time.monotonic()
    result = _closed_loop(server, "v1", documents, concurrency, requests, max_time_s)
    status = asyncio.run(_job_status(server.url, job_id))
    seconds = time.monotonic() - started
    asyncio.run(_cancel(server.url, job_id))
    return {
        **result,
        "job_pages_done": status["pages_done"],
        "job_pages_failed": status["pages_failed"],
        "seconds": round(seconds, 1),
    }


SHARE_CONFIG = (
    OURS_CPU_TOML
    + """[jobs]
data_dir = "{jobs_dir}"
min_share = {share}
"""
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench.job_impact", description=__doc__
    )
    parser.add_argument("--out", type=Path, default=Path("bench-out/job-share"))
    parser.add_argument("--pages", type=int, default=8, help="real document pages, as make bench")
    parser.add_argument("--dpi", type=float, default=150.0)
    parser.add_argument("--min-shares", default="0,0.1", help="jobs.min_share values, in order")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--job-copies", type=int, default=5, help="the job: copies of the pages")
    parser.add_argument("--max-time-s", type=float, default=900.0)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    paths = write_page_set(real_page_set(args.pages, args.dpi), args.out / "pages")
    documents = load_documents(paths)
    results: dict[str, dict[str, Any]] = {}
    for share in args.min_shares.split(","):
        out = args.out / f"share-{share}"
        out.mkdir(parents=True, exist_ok=True)
        server = start_ours(out, SHARE_CONFIG.format(jobs_dir=out / "jobs", share=float(share)))
        try:
            server.wait_ready("/readyz")
            results[share] = beside_busy_requests(
                server,
                documents,
                paths,
                concurrency=args.concurrency,
                requests=args.requests,
                job_copies=args.job_copies,
                max_time_s=args.max_time_s,
            )
        finally:
            server.stop()
    (args.out / "job-share.json").write_text(json.dumps(results, indent=1))
    job_pages = args.job_copies * len(paths)
    print(f"/v1/ocr at concurrency {args.concurrency} beside a {job_pages}-page job")
    print("| jobs.min_share | requests pages/s | p50 s | p95 s | job pages done | in s | errors |")
    print("|---|---|---|---|---|---|---|")
    for share, r in results.items():
        print(
            f"| {share} | {r['pages_per_s']:.3f} | {r['p50_s']:.2f} | {r['p95_s']:.2f} | "
            f"{r['job_pages_done']} | {r['seconds']} | {r['errors'] or '-'} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
