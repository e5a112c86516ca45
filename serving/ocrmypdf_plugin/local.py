"""The plugin's local mode: the server's runtime (CPU pool, scheduler, device workers) in
OCRmyPDF's own process, as `ocr-batch` runs it (`serving.batch.local`), without HTTP. Its event
loop runs on a thread of its own; OCRmyPDF's page threads hand it their pages, which meet in the
runtime's queues and are batched as a server's clients' are. It answers what `/v1/ocr` would."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from serving.errors import OcrError
from serving.ocrmypdf_plugin.client import OcrServerError

logger = logging.getLogger(__name__)
T = TypeVar("T")

FLAGS = ("words", "layout")
"""`/v1/ocr`'s output flags: read here, not by the runtime's request options."""


class LocalEngine:
    """The runtime on a background event loop; `start` loads the models, `close` stops it."""

    def __init__(self, config_path: Path | None, timeout_s: float) -> None:
        self._config_path = config_path
        self._timeout_s = timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="ocr-serving-local", daemon=True
        )
        self._runtime: Any = None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def start(self) -> None:
        """Read the configuration (the file named, else the defaults; `OCR_*` variables over
        either, as `ocr-serve` reads them) and start the runtime.

        Raises:
            OcrServerError: the configuration or the models do not load.
        """
        from serving.config import load_config
        from serving.service.runtime import Runtime

        try:
            config = load_config(self._config_path, os.environ)
            self._runtime = Runtime.build(config, jobs=False)
        except (OcrError, ValueError, OSError) as err:
            raise OcrServerError(f"the local OCR engine does not start: {err!s}") from err
        self._thread.start()
        logger.info("starting the local OCR engine (models load once for the whole run)")
        self._run(self._runtime.start())
        atexit.register(self.close)

    def languages(self) -> set[str]:
        """The languages the configured model sets read."""
        return set(self._runtime.describe_models()["languages"])

    def ocr(self, image: bytes, params: dict[str, str]) -> dict[str, Any]:
        """The page as `/v1/ocr` answers it with the same query `params`.

        Raises:
            OcrServerError: the runtime refused the page (its status and message).
        """
        return self._run(self._ocr(image, params))

    async def _ocr(self, image: bytes, params: dict[str, str]) -> dict[str, Any]:
        from serving.decode.readers import sniff_kind
        from serving.outputs.document import page_json
        from serving.request_options import NO_CLASSIFIER, query_overrides

        kind = sniff_kind(image) or "image"
        wanted = {name: params[name] == "true" for name in FLAGS if name in params}
        try:
            options = self._runtime.request_options(
                query_overrides(params),
                no_classifier=NO_CLASSIFIER,
            )
            (page,) = await self._runtime.service.ocr(
                image, kind, options, timeout_s=self._timeout_s
            )
        except OcrError as err:
            raise OcrServerError(
                f"the local OCR engine refused a page: {err.code}: {err.message}", err.http_status
            ) from err
        body: dict[str, Any] = page_json(
            page.result, words=wanted.get("words", False), layout=wanted.get("layout", False)
        )
        return body

    def close(self) -> None:
        """Stop the runtime and its loop (at exit; again is a no-op)."""
        if self._runtime is None or not self._thread.is_alive():
            return
        try:
            self._run(self._runtime.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
