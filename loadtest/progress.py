"""The live progress line on stderr: requests done, pages/s and errors, rewritten in place."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressLine"]


class ProgressLine:
    """A one-line status that a level rewrites with ``\\r`` as requests complete.

    On a stream that is not a terminal (CI logs, pipes) only the final line is written, so logs
    do not fill with carriage returns.
    """

    def __init__(
        self,
        label: str,
        *,
        total: int | None,
        duration_s: float | None,
        stream: TextIO | None = None,
        min_interval_s: float = 0.2,
    ) -> None:
        self._label = label
        self._total = total
        self._duration_s = duration_s
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty()
        self._min_interval_s = min_interval_s
        self._started = time.monotonic()
        self._written = -min_interval_s

    def _text(self, done: int, pages: int, errors: int) -> str:
        elapsed_s = time.monotonic() - self._started
        if self._total is not None:
            progress = f"{done}/{self._total}"
        else:
            progress = f"{done} done, {elapsed_s:.0f}/{self._duration_s:g}s"
        pages_s = pages / elapsed_s if elapsed_s > 0 else 0.0
        return f"[{self._label}] {progress}  {pages_s:.2f} pages/s  {errors} errors"

    def update(self, done: int, pages: int, errors: int) -> None:
        """Show the counts so far, at most once per ``min_interval_s``."""
        now = time.monotonic()
        if not self._live or now - self._written < self._min_interval_s:
            return
        self._written = now
        self._stream.write("\r\x1b[2K" + self._text(done, pages, errors))
        self._stream.flush()

    def finish(self, done: int, pages: int, errors: int) -> None:
        """Write the final counts and end the line."""
        prefix = "\r\x1b[2K" if self._live else ""
        self._stream.write(prefix + self._text(done, pages, errors) + "\n")
        self._stream.flush()
