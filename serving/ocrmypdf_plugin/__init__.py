"""OCRmyPDF plugin: this project's OCR as OCRmyPDF's engine, with real word boxes.

    ocrmypdf --plugin serving.ocrmypdf_plugin --ocr-server http://host:8000 in.pdf out.pdf
    ocrmypdf --plugin serving.ocrmypdf_plugin in.pdf out.pdf      # local: the models in process

Only a run that names the plugin with `--plugin` loads it (the project declares no `ocrmypdf`
entry point, which would load it into every run), and even then `--ocr-engine tesseract` or
`none` runs that engine: ours answers `get_ocr_engine` only for `--ocr-engine auto`, the default.
Details: docs/ocrmypdf.md.
"""

from __future__ import annotations

import logging
import os
from argparse import ArgumentParser
from typing import Any

from ocrmypdf import hookimpl
from ocrmypdf.exceptions import BadArgsError

from serving.ocrmypdf_plugin.backend import PluginSettings
from serving.ocrmypdf_plugin.client import MAX_ANSWER_BYTES
from serving.ocrmypdf_plugin.engine import ServingOcrEngine

logger = logging.getLogger(__name__)

API_KEY_VARIABLE = "OCR_SERVER_API_KEY"
"""Where `--ocr-api-key` is read from when not given (a key on the command line shows in `ps`)."""


def selected(options: Any) -> bool:
    """Whether this run asked for our engine: the plugin is loaded (named with `--plugin`) and
    `--ocr-engine` is left at `auto`."""
    return options is not None and getattr(options, "ocr_engine", "auto") == "auto"


@hookimpl
def add_options(parser: ArgumentParser) -> None:
    group = parser.add_argument_group(
        "ocr-serving", "OCR by this project's server (or its models in process)"
    )
    group.add_argument(
        "--ocr-server",
        metavar="URL",
        help="the OCR server, e.g. http://host:8000; without it the models run in process",
    )
    group.add_argument(
        "--ocr-api-key",
        metavar="KEY",
        default=os.environ.get(API_KEY_VARIABLE),
        help=f"the server's API key (default: ${API_KEY_VARIABLE})",
    )
    group.add_argument(
        "--ocr-timeout-s",
        type=float,
        default=300.0,
        metavar="S",
        help="one page's request timeout in seconds (default 300)",
    )
    group.add_argument(
        "--ocr-retries",
        type=int,
        default=5,
        metavar="N",
        help="retries of a page the server answers 429 or 503, after its Retry-After (default 5)",
    )
    group.add_argument(
        "--ocr-max-answer-bytes",
        type=int,
        default=MAX_ANSWER_BYTES,
        metavar="N",
        help=f"refuse a server answer larger than N bytes (default {MAX_ANSWER_BYTES})",
    )
    group.add_argument(
        "--ocr-config",
        metavar="PATH",
        help="local mode: the server's config file (default: its defaults, OCR_* variables over)",
    )


@hookimpl
def check_options(options: Any) -> None:
    if not selected(options):
        return
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line for every page
    settings = PluginSettings.of(options)
    if settings.retries < 0 or settings.timeout_s <= 0 or settings.max_answer_bytes <= 0:
        raise BadArgsError(
            "--ocr-retries must be >= 0, --ocr-timeout-s > 0 and --ocr-max-answer-bytes > 0"
        )
    if options.pdf_renderer == "sandwich":
        # Ours is OCRmyPDF 17's generate_ocr, which its fpdf2 renderer draws (auto, hocr too).
        raise BadArgsError("ocr-serving: use --pdf-renderer auto or fpdf2, not sandwich")
    if settings.server is None and not options.use_threads:
        # Local mode's runtime lives in this process: page workers must be its threads.
        logger.info("ocr-serving local mode: page workers run as threads")
        options.use_threads = True


@hookimpl
def get_ocr_engine(options: Any) -> ServingOcrEngine | None:
    return ServingOcrEngine() if selected(options) else None
