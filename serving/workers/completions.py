"""Completion notices for a device worker's launched batches, as bytes on a pipe.

A device worker waits for "a new batch arrived, or my oldest launched batch is done" with one
`multiprocessing.connection.wait` call: a thread waits for each launched batch's device work in
launch order and writes one byte per finished batch to a pipe the worker selects on.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable


class Completions:
    """Waits, in order, for each submitted batch and writes a byte to `reader` when it is done."""

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        self._waits: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="completions", daemon=True)
        self._thread.start()

    @property
    def reader(self) -> int:
        """The file descriptor to select on: readable once the oldest batch is done."""
        return self._read_fd

    def submit(self, wait: Callable[[], None]) -> None:
        """Follow one more batch; `wait` blocks until it is done (and must not raise)."""
        self._waits.put(wait)

    def take(self) -> None:
        """Block until the oldest batch submitted and not yet taken is done."""
        os.read(self._read_fd, 1)

    def close(self) -> None:
        """Stop the thread and close the pipe."""
        self._waits.put(None)
        self._thread.join(timeout=5)
        os.close(self._read_fd)
        os.close(self._write_fd)

    def _run(self) -> None:
        while True:
            wait = self._waits.get()
            if wait is None:
                return
            try:
                wait()
            finally:
                os.write(self._write_fd, b"x")
