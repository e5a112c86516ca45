"""Which OCR the plugin's engine calls, from OCRmyPDF's options: the server named by
`--ocr-server`, or the runtime in process (local mode). One per process, shared by OCRmyPDF's page
threads, so that their pages reach the same queues at once."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from serving.ocrmypdf_plugin.client import MAX_ANSWER_BYTES, ClientSettings, ServerClient


class Backend(Protocol):
    """What the engine needs: a page's `/v1/ocr` JSON, and the languages read."""

    def ocr(self, image: bytes, params: dict[str, str]) -> dict[str, Any]: ...

    def languages(self) -> set[str]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginSettings:
    """The plugin's options as OCRmyPDF parsed them (`serving.ocrmypdf_plugin.add_options`)."""

    server: str | None
    api_key: str | None
    timeout_s: float
    retries: int
    config: Path | None
    max_answer_bytes: int = MAX_ANSWER_BYTES

    @classmethod
    def of(cls, options: Any) -> PluginSettings:
        """Read from OCRmyPDF's `OcrOptions` (plugin options live in its `extra_attrs`)."""

        def get(name: str, default: Any) -> Any:
            value = getattr(options, name, None)
            return default if value is None else value

        config = get("ocr_config", None)
        return cls(
            server=get("ocr_server", None),
            api_key=get("ocr_api_key", None),
            timeout_s=float(get("ocr_timeout_s", 300.0)),
            retries=int(get("ocr_retries", 5)),
            config=Path(config) if config else None,
            max_answer_bytes=int(get("ocr_max_answer_bytes", MAX_ANSWER_BYTES)),
        )


_lock = threading.Lock()
_backends: dict[PluginSettings, Backend] = {}


def backend_for(options: Any) -> Backend:
    """The process's backend for these options: made (and, in local mode, started) on first use.

    Raises:
        OcrServerError: local mode's runtime does not start.
    """
    settings = PluginSettings.of(options)
    with _lock:
        found = _backends.get(settings)
        if found is None:
            found = _make(settings)
            _backends[settings] = found
        return found


def _make(settings: PluginSettings) -> Backend:
    if settings.server:
        return ServerClient(
            ClientSettings(
                url=settings.server,
                api_key=settings.api_key,
                timeout_s=settings.timeout_s,
                retries=settings.retries,
                max_answer_bytes=settings.max_answer_bytes,
            )
        )
    from serving.ocrmypdf_plugin.local import LocalEngine

    engine = LocalEngine(settings.config, settings.timeout_s)
    engine.start()
    return engine
