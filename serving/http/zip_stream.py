"""A zip archive made as it is sent: each member's bytes go out as they are compressed, so neither
the archive nor a whole member is ever held in memory.

`zipfile` writes to a stream it cannot seek (sizes and CRCs then follow each member in a data
descriptor, which every unzip reads); `ZipStream` is that stream, drained after every write.
"""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Iterable, Iterator


class _Sink(io.RawIOBase):
    """A write-only, unseekable stream whose bytes are taken out as they come."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self._chunks.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        """The bytes written since the last drain."""
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data


class ZipStream:
    """Members added one at a time, each yielding the archive's bytes as they are made; `close()`
    gives the central directory. Not thread-safe: one member at a time."""

    def __init__(self) -> None:
        self._sink = _Sink()
        self._zip = zipfile.ZipFile(self._sink, "w", allowZip64=True)
        self._date_time = time.gmtime()[:6]

    def member(
        self, name: str, chunks: Iterable[bytes], *, compress: bool = True
    ) -> Iterator[bytes]:
        """Add `name` with the bytes of `chunks`; yields the archive's bytes as they are made.
        `compress=False` stores them as they are (PDFs, whose streams are compressed already)."""
        info = zipfile.ZipInfo(name, date_time=self._date_time)
        info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        info.external_attr = 0o644 << 16
        with self._zip.open(info, "w", force_zip64=True) as dest:
            for chunk in chunks:
                dest.write(chunk)
                data = self._sink.drain()
                if data:
                    yield data
        data = self._sink.drain()
        if data:
            yield data

    def close(self) -> bytes:
        """The end of the archive (its central directory)."""
        self._zip.close()
        return self._sink.drain()
