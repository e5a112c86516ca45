"""`ocr-batch`: OCR files, folders and globs in-process (or on a server), resumably, with progress.

In-process, it builds the server's own runtime (CPU pool, scheduler, device workers) without HTTP
and feeds it one page at a time; `--server URL` submits a job to a running server instead and
follows its results. Either way every page lands in the output folder's manifest as it is done,
so a rerun skips what is done (see `serving.jobs.manifest`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from models.base import EngineBackendError
from serving.config import AppConfig, load_config
from serving.documents import count_pages
from serving.errors import ConfigError, OcrError
from serving.jobs.files import find_inputs, sniff_file
from serving.jobs.manifest import (
    BatchDocument,
    Manifest,
    PageKey,
    file_sha256,
    write_outputs,
)
from serving.jobs.options import page_record, parse_options
from serving.log_config import configure_logging
from serving.request_options import NO_CLASSIFIER, overrides
from serving.scheduling.priorities import BACKGROUND

logger = logging.getLogger("serving.batch")

Progress = Callable[[int], "tqdm[Any]"]
"""Makes the progress bar for a number of pages."""

MAX_ATTEMPTS = 3
"""Tries of a page that meets a passing condition (503 or 504)."""


class BatchError(Exception):
    """A problem that stops the run; the message is for the user."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(
        prog="ocr-batch",
        description="OCR images and PDFs into JSONL (one line per page) or a file per document. "
        "Resumable: a rerun skips the pages already done.",
    )
    # "*", not "+": `--ray INPUT ...` hands its first input to --ray, which gives it back below.
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help="files, folders or globs")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument(
        "--format",
        choices=("jsonl", "txt", "json"),
        default="jsonl",
        help="jsonl: OUT/results.jsonl, one line per page (default); txt or json: one per document",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("OCR_CONFIG"),
        help="config.toml for the in-process run (default: $OCR_CONFIG, else built-in defaults)",
    )
    parser.add_argument("--server", metavar="URL", help="submit to this server's jobs API")
    parser.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="OCR option, named as /v1/ocr's query parameters (det_thresh=0.2, ...)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        help="pages in flight in-process (default: jobs.max_inflight_pages)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    ray = parser.add_argument_group(
        "Ray", "run on Ray Data (the `ray` extra; see serving.jobs.ray_batch and the README)"
    )
    ray.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run on a Ray cluster: HEAD:6379, auto, local; none given: $RAY_ADDRESS, else the "
        "cluster `ray start` started here, else a local Ray (--ray=ADDRESS before the inputs)",
    )
    ray.add_argument("--det-actors", type=int, default=1, help="detection actors (default 1)")
    ray.add_argument("--rec-actors", type=int, default=1, help="recognition actors (default 1)")
    ray.add_argument("--cls-actors", type=int, default=1, help="classifier actors (default 1)")
    ray.add_argument(
        "--gpus-per-actor", type=float, default=0.0, help="GPU share of a model actor; 0: CPU"
    )
    ray.add_argument(
        "--cpus-per-actor", type=float, default=1.0, help="cores a model actor reserves"
    )
    ray.add_argument(
        "--cpus-per-task", type=float, default=1.0, help="cores a decode/post-process task reserves"
    )
    parser.add_argument("--log-level", default="warning", help="in-process log level")
    args = parser.parse_args(argv)
    if args.ray and Path(args.ray).exists():  # `--ray docs/ ...`: an input, not a cluster address
        args.inputs.insert(0, args.ray)
        args.ray = ""
    if not args.inputs:
        parser.error("the following arguments are required: INPUT")
    return args


def plan(specs: list[str]) -> tuple[list[BatchDocument], list[str]]:
    """The documents named by `specs`, and a problem line for each file that is not one."""
    documents, problems = [], []
    for name, path in find_inputs(specs):
        kind = sniff_file(path)
        if kind is None:
            problems.append(f"{name}: neither a PDF nor a supported image; skipped")
            continue
        try:
            pages = count_pages(path, kind)
        except OcrError as err:
            problems.append(f"{name}: {err.message}; skipped")
            continue
        digest = file_sha256(path)
        documents.append(BatchDocument(name=name, path=path, kind=kind, pages=pages, sha256=digest))
    return documents, problems


async def run_local(
    config: AppConfig,
    todo: list[tuple[BatchDocument, int]],
    manifest: Manifest,
    concurrency: int,
    progress: Progress,
) -> dict[PageKey, dict[str, Any]]:
    """OCR `todo` with an in-process runtime; returns the pages that failed, with their errors."""
    from serving.runtime import Runtime  # the server's parts: loaded only for in-process runs

    failures: dict[PageKey, dict[str, Any]] = {}
    runtime = Runtime.build(config, jobs=False)
    try:  # before any model loads: a classifier asked for and not configured stops the run
        options = runtime.request_options(overrides(manifest.options), no_classifier=NO_CLASSIFIER)
    except OcrError as err:
        raise BatchError(err.message) from err
    queue = list(reversed(todo))
    try:
        await runtime.start()
        with progress(len(todo)) as bar:

            async def worker() -> None:
                while queue:
                    doc, page = queue.pop()
                    key = (doc.sha256, page)
                    for attempt in range(1, MAX_ATTEMPTS + 1):
                        try:
                            out = await runtime.service.ocr_page_of(
                                str(doc.path),
                                doc.kind,
                                page,
                                options,
                                priority=BACKGROUND,
                                timeout_s=config.jobs.page_timeout_s,
                            )
                        except OcrError as err:
                            if err.http_status in (503, 504) and attempt < MAX_ATTEMPTS:
                                continue
                            failures[key] = {"code": err.code, "message": err.message}
                            bar.write(f"ocr-batch: {doc.name} page {page + 1}: {err.message}")
                        else:
                            record = page_record(doc.name, page, out.result, sha256=doc.sha256)
                            await asyncio.to_thread(manifest.append, key, record)
                        break
                    bar.update(1)

            await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    finally:
        await runtime.stop()
    return failures


def main(argv: list[str] | None = None) -> int:
    """Entry point of `ocr-batch`; 0 when every page is done, 1 when some failed, 2 on errors."""
    args = parse_args(argv)
    try:
        return _main(args)
    except (BatchError, ConfigError, EngineBackendError, FileNotFoundError) as err:
        _say(f"ocr-batch: {err}", error=True)
        return 2
    except OcrError as err:
        _say(f"ocr-batch: {err.message}", error=True)
        return 2


def _main(args: argparse.Namespace) -> int:
    options = parse_options(dict(_option(text) for text in args.option))
    if args.ray is not None:
        from serving.jobs.ray_batch import main_ray

        return main_ray(args, options, _config(args))
    documents, problems = plan(args.inputs)
    for problem in problems:
        _say(f"ocr-batch: {problem}", error=True)
    if not documents:
        raise BatchError("no document to OCR")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(out, options)
    manifest.load()
    keys = [key for doc in documents for key in doc.page_keys()]
    skipped = sum(manifest.done(key) for key in set(keys))
    todo = [(doc, key[1]) for doc in documents for key in doc.page_keys() if not manifest.done(key)]
    todo = list({(doc.sha256, page): (doc, page) for doc, page in todo}.values())
    _say(
        f"ocr-batch: {len(documents)} documents, {len(set(keys))} pages: {len(todo)} to do, "
        f"{skipped} skipped (already done)"
    )

    def progress(total: int) -> tqdm[Any]:
        return tqdm(total=total, unit="page", desc="ocr-batch", disable=args.quiet, file=sys.stderr)

    failures: dict[PageKey, dict[str, Any]] = {}
    try:
        if todo and args.server:
            from serving.jobs.remote import run_remote

            failures = run_remote(args.server, documents, manifest, progress)
        elif todo:
            config = _config(args)
            concurrency = args.concurrency or config.jobs.max_inflight_pages
            failures = asyncio.run(run_local(config, todo, manifest, concurrency, progress))
    finally:
        manifest.close()
    changed = write_outputs(out, args.format, documents, manifest, failures)
    done_now = len(todo) - len(failures)
    _say(
        f"ocr-batch: {done_now} pages done now, {skipped} skipped (already done), "
        f"{len(failures)} failed; "
        + (f"wrote {', '.join(str(p) for p in changed)}" if changed else "outputs unchanged")
    )
    return 1 if failures or problems else 0


def _config(args: argparse.Namespace) -> AppConfig:
    config = load_config(args.config, os.environ)  # OCR_* overrides, as ocr-serve reads them
    configure_logging(args.log_level)
    server = dataclasses.replace(config.server, log_level=args.log_level)
    return dataclasses.replace(config, server=server)


def _option(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep:
        raise BatchError(f"--option {text!r}: expected NAME=VALUE")
    return name.strip(), value.strip()


def _say(message: str, *, error: bool = False) -> None:
    print(message, file=sys.stderr if error else sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
