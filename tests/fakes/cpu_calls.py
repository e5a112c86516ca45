"""Functions and initializers for CPU pool tests: importable by spawned worker processes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from serving.errors import InvalidInput


def init_noop() -> None:
    return None


def init_slowly(pid_dir: str, delay_s: float) -> None:
    """An initializer that announces its pid, then takes `delay_s` (a worker caught starting)."""
    Path(pid_dir, f"starting-{os.getpid()}").touch()
    time.sleep(delay_s)


def pid() -> int:
    return os.getpid()


def add(a: int, b: int) -> int:
    return a + b


def refuse(message: str) -> None:
    raise InvalidInput(message)


def announce_then_sleep(pid_dir: str, delay_s: float) -> int:
    """Write this worker's pid where the test can see it is busy, then work for `delay_s`."""
    Path(pid_dir, f"busy-{os.getpid()}").touch()
    time.sleep(delay_s)
    return os.getpid()


def die() -> None:
    """Kill the worker running this call (an input that crashes its decoder, every time)."""
    os._exit(9)


def record(path: str, name: str) -> None:
    """Append `name` to the file at `path`: the order calls ran in."""
    with open(path, "a") as out:
        out.write(name + "\n")


CRASH_MARK = b"%PDF-1.7 crash"
"""How a document that crashes pdfium starts, for `init_crash_on_mark`."""


def init_crash_on_mark() -> None:
    """Worker initializer: reading a stored document that starts with `CRASH_MARK` kills the
    worker, as a pdfium crash would; other documents are read for real."""
    from serving.decode import documents

    real_plan, real_stage = documents.staging_plan, documents.stage_document

    def crash_on_mark(path: str) -> None:
        with open(path, "rb") as f:
            if f.read(len(CRASH_MARK)) == CRASH_MARK:
                os._exit(11)

    def staging_plan(path: str, kind: object, limits: object) -> object:
        crash_on_mark(path)
        return real_plan(path, kind, limits)  # type: ignore[arg-type]

    def stage_document(path: str, kind: object, limits: object) -> int:
        crash_on_mark(path)
        return real_stage(path, kind, limits)  # type: ignore[arg-type]

    documents.staging_plan = staging_plan  # type: ignore[assignment]
    documents.stage_document = stage_document  # type: ignore[assignment]


POISON_MARK = b"poison-pill"
"""What an image holds (in a PNG text chunk, say) for `init_cpu_worker_poisoned` to crash on."""
HANG_MARK = b"hang-pill"
"""What an image holds for `init_cpu_worker_poisoned` to hang on (a decoder in an endless loop)."""


def init_cpu_worker_poisoned(*args: object) -> None:
    """The server's CPU worker initializer (`init_cpu_worker`); then decoding an image whose bytes
    hold `POISON_MARK` kills the worker, as a decoder crash would (its header reads as usual)."""
    from serving.decode import readers
    from serving.workers.cpu_stages import init_cpu_worker

    init_cpu_worker(*args)  # type: ignore[arg-type]
    real = readers.decode_image
    real_frame = readers._decode_frame

    def _poisoned(data: bytes) -> None:
        if POISON_MARK in data:
            os._exit(11)
        if HANG_MARK in data:
            time.sleep(3600)

    def decode_image(data: bytes, limits: readers.DecodeLimits) -> object:
        _poisoned(data)
        return real(data, limits)

    def decode_frame(data: bytes, header: object, limits: object, index: int) -> object:
        _poisoned(data)  # a frame of a multi-page image
        return real_frame(data, header, limits, index)  # type: ignore[arg-type]

    readers.decode_image = decode_image  # type: ignore[assignment]
    readers._decode_frame = decode_frame  # type: ignore[assignment]
