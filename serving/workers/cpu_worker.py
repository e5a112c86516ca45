"""The body of one CPU worker process: set up once, then run calls one at a time until told to stop.

A call arrives as `(fn, args)` over the pipe and its outcome goes back as `("ok", value)` or
`("error", exception)`; `None` asks the process to exit. Start-up data stays a few hundred bytes
(large tables, such as the recogniser's labels, are read from the model directory by the
initializer), so spawning never fills the pipe the parent writes it through.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from serving.errors import OcrError
from serving.workers.proc import release_free_heap
from serving.workers.sandbox import WorkerLimits

logger = logging.getLogger(__name__)

Call = tuple[Callable[..., Any], tuple[Any, ...]]


def cpu_worker_main(
    conn: Connection,
    initializer: Callable[..., None],
    initargs: tuple[Any, ...],
    limits: WorkerLimits | None = None,
) -> None:
    """Process entry point (spawned by `serving.workers.cpu_pool`): unreadable to its uid at
    once, `limits` set once the initializer has run, the CPU time before each call
    (`serving.workers.sandbox`)."""
    limits = limits or WorkerLimits()
    limits.seal()
    initializer(*initargs)
    limits.apply()
    conn.send(("ready", None))
    while True:
        try:
            message: Call | None = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if message is None:
            return
        fn, args = message
        limits.arm_task()
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except Exception as err:  # every failure goes back to the caller, never kills the loop
            reply = ("error", err)
        _send(conn, reply)
        del message, fn, args, reply
        release_free_heap()


def _send(conn: Connection, reply: tuple[str, Any]) -> None:
    try:
        conn.send(reply)
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        # An exception (or value) that does not pickle still gets an answer to its caller.
        logger.exception("a CPU stage's outcome could not be sent back")
        conn.send(("error", OcrError(f"unpicklable outcome: {err}")))
