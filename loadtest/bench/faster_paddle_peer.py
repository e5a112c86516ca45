"""faster-paddle (PyPI 1.0.4, MIT: PP-OCRv6 in Rust on its own ONNX Runtime) as an in-process
peer: no server, no HTTP, as its users call it.

`OcrEngine(model_size=..., threads=...)` loads its bundled models ("tiny" and "small" are in the
wheel; "medium" would download, which the bench never does). Each page is read once alone
(`engine.ocr(bytes)`), then all pages together (`engine.ocr_batch(list, batch_size=4)`, its
multi-page path, the one the issue measured); a batch page counts as correct where its lines
are the ones the page gave alone, as a server's answers under load are counted. The engine runs
in a spawned process of its own (its ONNX Runtime 1.28 is linked into its extension, beside
ours), whose own CPU seconds are measured there. Lines are those of its reading-order
`structured_text` (`_lines`).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import resource
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

__all__ = ["MODEL_SIZES", "PACKAGE", "installed", "measure"]

PACKAGE = "faster-paddle==1.0.4"
"""The release measured (the `bench` extra)."""
MODEL_SIZES = ("small", "tiny")
"""Its bundled models."""
BATCH_PAGES = 4
"""`ocr_batch`'s window: decoded pages resident at once (its default)."""


def installed() -> bool:
    """Whether faster_paddle imports here."""
    return importlib.util.find_spec("faster_paddle") is not None


def _lines(result: dict[str, Any]) -> list[str]:
    """The page's lines in reading order: its `structured_text`'s non-empty lines. Its `bounds`
    come in detection order, which an order-sensitive CER counts as errors (a bench page:
    8.4% CER in `bounds` order, 4.2% in its `text`, 1.5% in its `structured_text`)."""
    return [line.strip() for line in str(result["structured_text"]).splitlines() if line.strip()]


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _run(model_size: str, threads: int, paths: list[Path], conn: Connection) -> None:
    """In the spawned process: load, warm up, read each page alone, then all in batches."""
    import faster_paddle  # the bench extra

    engine = faster_paddle.OcrEngine(model_size=model_size, threads=threads)
    data = [path.read_bytes() for path in paths]
    engine.ocr(data[0])  # warm-up: sessions and first-shape allocations
    started, cpu = time.monotonic(), _cpu_s()
    alone = [_lines(engine.ocr(page)) for page in data]
    alone_s, alone_cpu = time.monotonic() - started, _cpu_s() - cpu
    started, cpu = time.monotonic(), _cpu_s()
    batch = [_lines(r) for r in engine.ocr_batch(data, batch_size=BATCH_PAGES)]
    batch_s, batch_cpu = time.monotonic() - started, _cpu_s() - cpu
    conn.send(
        {
            "version": str(faster_paddle.__version__),
            "config": dict(engine.config),
            "alone": alone,
            "alone_s": alone_s,
            "alone_cpu_s": alone_cpu,
            "batch": batch,
            "batch_s": batch_s,
            "batch_cpu_s": batch_cpu,
        }
    )


def measure(model_size: str, threads: int, paths: Sequence[Path]) -> dict[str, Any]:
    """faster-paddle's `model_size` on `paths` with `threads` threads: pages/s alone and in
    batches, correct batch pages/s, core-seconds a page, and each page's lines alone
    ("texts", file name -> lines)."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_run, args=(model_size, threads, list(paths), child))
    process.start()
    try:
        got: dict[str, Any] = parent.recv()
    except EOFError as err:
        raise RuntimeError(f"faster-paddle {model_size} exited ({process.exitcode})") from err
    finally:
        process.join()
    pages = len(paths)
    correct = sum(b == a for a, b in zip(got["alone"], got["batch"], strict=True))
    return {
        "version": got["version"],
        "config": got["config"],
        "alone_pages_s": round(pages / got["alone_s"], 4),
        "batch_pages_s": round(pages / got["batch_s"], 4),
        "batch_correct_pages_s": round(correct / got["batch_s"], 4),
        "batch_changed": pages - correct,
        "alone_core_s_a_page": round(got["alone_cpu_s"] / pages, 3),
        "batch_core_s_a_page": round(got["batch_cpu_s"] / pages, 3),
        "texts": {Path(p).name: lines for p, lines in zip(paths, got["alone"], strict=True)},
    }
