"""`ocr-batch`'s command line: its flags, the plan, and the driver they choose.

In-process (`serving.batch.local`), it builds the server's own runtime without HTTP; `--server
URL` (`serving.batch.remote`) submits a job to a running server instead and follows its results;
`--ray` (`serving.batch.ray_driver`) runs the page pipeline on Ray Data. Every driver starts from
the same plan (`serving.batch.plan`) and puts each page into the output folder's manifest as it is
done, so a rerun skips what is done (see `serving.batch.manifest`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from models.base import EngineBackendError
from serving.batch.manifest import PageKey
from serving.batch.object_storage import (
    client_of,
    download_inputs,
    pull_manifest,
    push_outputs,
    uses_storage,
    work_folder,
)
from serving.batch.outputs import BATCH_FORMATS, write_outputs
from serving.batch.plan import BatchError, open_plan
from serving.config import AppConfig, load_config
from serving.errors import ConfigError, OcrError
from serving.jobs.options import parse_options
from serving.log_config import configure_logging
from serving.outputs.document import TEXT_MODES


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line flags."""
    parser = argparse.ArgumentParser(
        prog="ocr-batch",
        description="OCR images and PDFs into JSONL (one line per page) or a file per document. "
        "Resumable: a rerun skips the pages already done.",
    )
    # "*", not "+": `--ray INPUT ...` hands its first input to --ray, which gives it back below.
    parser.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUT",
        help="files, folders or globs; s3://bucket/prefix/ or s3://bucket/key (downloaded first)",
    )
    parser.add_argument(
        "--out",
        required=True,
        help="output folder, or s3://bucket/prefix/ (its manifest read back, everything "
        "uploaded at the end); s3:// uses storage.s3_credentials_file of --config",
    )
    parser.add_argument(
        "--format",
        choices=BATCH_FORMATS,
        default="jsonl",
        help="jsonl: OUT/results.jsonl, one line per page (default); json, txt (reading order), "
        "hocr, alto or pdf (searchable, built on the input): a file per document",
    )
    parser.add_argument(
        "--mode",
        choices=TEXT_MODES,
        default="skip",
        help="--format pdf of a PDF, as OCRmyPDF's --mode: its pages that have text are kept as "
        "they are (skip, the default), get the OCR layer over their text (force), or have an "
        "earlier OCR layer replaced by this one (redo)",
    )
    parser.add_argument(
        "--deskew",
        action="store_true",
        help="--format pdf: each page shown straightened by its skew, the text layer with it "
        "(OCRmyPDF's --deskew; the image is drawn turned, not re-encoded)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("OCR_CONFIG"),
        help="config.toml for the in-process run (default: $OCR_CONFIG, else built-in defaults)",
    )
    parser.add_argument("--server", metavar="URL", help="submit to this server's jobs API")
    parser.add_argument(
        "--api-key-env",
        default="OCR_API_KEY",
        metavar="NAME",
        help="--server: the environment variable holding the API key sent (default OCR_API_KEY; "
        "unset: none sent)",
    )
    parser.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="OCR option, named as /v1/ocr's query parameters (det_thresh=0.2, ...)",
    )
    parser.add_argument(
        "--lang",
        help="language of the pages (PaddleOCR's codes: fr, de, japan, ...): the model set that "
        "reads it (the same as -o lang=...)",
    )
    parser.add_argument("--model", help="model set by name (GET /v1/models; -o model=...)")
    parser.add_argument(
        "--concurrency",
        type=int,
        help="pages in flight in-process (default: jobs.max_inflight_pages)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    ray = parser.add_argument_group(
        "Ray", "run on Ray Data (the `ray` extra; see serving.batch.ray_driver and the README)"
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
    args.out_url = args.out if args.out.startswith("s3://") else None
    args.out = None if args.out_url else Path(args.out)
    return args


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
    raw = dict(_option(text) for text in args.option)
    raw.update({name: getattr(args, name) for name in ("lang", "model") if getattr(args, name)})
    options = parse_options(raw)
    if args.ray is not None:
        if uses_storage(args.inputs, args.out_url or ""):
            raise BatchError(
                "--ray reads inputs from a file system every node mounts: s3:// is not supported "
                "with --ray (sync the objects to it first)"
            )
        from serving.batch.ray_driver import main_ray

        return main_ray(args, options, _config(args))
    if not uses_storage(args.inputs, args.out_url or ""):
        return _run(args, options)
    with work_folder() as work:
        client = client_of(_config(args))
        args.inputs = download_inputs(client, args.inputs, work)
        if args.out_url is not None:
            args.out = work / "out"
            args.out.mkdir()
            pull_manifest(client, args.out_url, args.out)
        try:
            return _run(args, options)
        finally:  # what was done is kept, the manifest with it, even when the run stopped
            if args.out_url is not None and any(args.out.iterdir()):
                written = push_outputs(client, args.out_url, args.out)
                _say(f"ocr-batch: uploaded {len(written)} files to {args.out_url}")


def _run(args: argparse.Namespace, options: dict[str, Any]) -> int:
    """Plan and run the pages of `args.inputs` into the folder `args.out`."""
    plan, manifest = open_plan(
        args.inputs,
        args.out,
        options,
        say=lambda message: _say(f"ocr-batch: {message}"),
        warn=lambda message: _say(f"ocr-batch: {message}", error=True),
    )

    def progress(total: int) -> tqdm[Any]:
        return tqdm(total=total, unit="page", desc="ocr-batch", disable=args.quiet, file=sys.stderr)

    failures: dict[PageKey, dict[str, Any]] = {}
    try:
        if plan.todo and args.server:
            from serving.batch.remote import run_remote

            api_key = os.environ.get(args.api_key_env) or None
            failures = run_remote(args.server, plan.documents, manifest, progress, api_key=api_key)
        elif plan.todo:
            from serving.batch.local import run_local

            config = _config(args)
            concurrency = args.concurrency or config.jobs.max_inflight_pages
            failures = asyncio.run(run_local(config, plan.todo, manifest, concurrency, progress))
    finally:
        manifest.close()
    changed = write_outputs(
        args.out,
        args.format,
        plan.documents,
        manifest,
        failures,
        inputs=_config(args).input,
        mode=args.mode,
        deskew=args.deskew,
    )
    done_now = len(plan.todo) - len(failures)
    _say(
        f"ocr-batch: {done_now} pages done now, {plan.skipped} skipped (already done), "
        f"{len(failures)} failed; "
        + (f"wrote {', '.join(str(p) for p in changed)}" if changed else "outputs unchanged")
    )
    return 1 if failures or plan.problems else 0


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
