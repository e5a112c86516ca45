"""How much a large batch job slows interactive requests, and how much a busy server lets it do.

For each jobs' share (`jobs.min_share`, `--min-shares`), a server of its own serves `/v1/ocr`
closed-loop at `--levels`' concurrency (one that keeps every device busy) first alone, then while
a job of `--job-copies` x the bench's pages runs beside it at background priority; the
requests' figures and the job pages done meanwhile:

    ocr-bench job-share --min-shares 0,0.1 --levels 4 --requests 96
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import httpx

from loadtest.bench.common import real_pages, write_pages
from loadtest.bench.options import count
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.client import Api
from loadtest.documents import Document, load_documents
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


@register
class JobShare(Scenario):
    """Requests alone and beside a batch job, per jobs' share."""

    name = "job-share"
    help = "interactive requests alone and beside a batch job, per jobs.min_share"
    shared = ("out", "pages", "dpi", "levels", "requests", "max_time_s")
    defaults: ClassVar[dict[str, Any]] = {"levels": [4], "requests": 96}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument(
            "--min-shares",
            type=lambda s: [float(x) for x in s.split(",") if x],
            default=[0.0, 0.1],
            help="jobs.min_share values, a server each (default 0,0.1)",
        )
        parser.add_argument(
            "--job-copies", type=count(1), default=5, help="the job: copies of the pages"
        )

    def run(self, args: argparse.Namespace) -> Results:
        """Each share's server: alone, then beside the job."""
        paths = write_pages(real_pages(args.pages, args.dpi), args.out / "pages")
        documents = load_documents(paths)
        concurrency = args.levels[0]
        requests = args.requests or 2 * len(paths)
        results: dict[str, dict[str, Any]] = {}
        for share in args.min_shares:
            out = args.out / f"share-{share:g}"
            out.mkdir(parents=True, exist_ok=True)
            server = start_ours(out, SHARE_CONFIG.format(jobs_dir=out / "jobs", share=share))
            try:
                server.wait_ready("/readyz")
                alone = _closed_loop(
                    server, "v1", documents, concurrency, requests, args.max_time_s
                )
                beside = beside_busy_requests(
                    server,
                    documents,
                    paths,
                    concurrency=concurrency,
                    requests=requests,
                    job_copies=args.job_copies,
                    max_time_s=args.max_time_s,
                )
            finally:
                server.stop()
            results[f"{share:g}"] = {"alone": alone, "beside_job": beside}
        job_pages = args.job_copies * len(paths)
        lines = [
            f"/v1/ocr at concurrency {concurrency} alone, then beside a {job_pages}-page job",
            "",
            "| jobs.min_share | alone pages/s | alone p95 s | beside pages/s | p50 s | p95 s "
            "| job pages done | in s | errors |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for share, r in results.items():
            a, b = r["alone"], r["beside_job"]
            lines.append(
                f"| {share} | {a['pages_per_s']:.3f} | {a['p95_s'] or 0:.2f} | "
                f"{b['pages_per_s']:.3f} | {b['p50_s'] or 0:.2f} | {b['p95_s'] or 0:.2f} | "
                f"{b['job_pages_done']} | {b['seconds']} | {b['errors'] or '-'} |"
            )
        speeds = {
            f"share {k}, beside a job": r["beside_job"]["pages_per_s"] for k, r in results.items()
        }
        return Results(
            data=results,
            markdown="\n".join(lines) + "\n",
            plots={"pages_s": bars("Requests beside a job", "pages/s", speeds)},
        )
