"""The body of one CPU worker process: set up once, then run calls one at a time until told to stop.

A call arrives as `(fn, args, trace)` over the pipe (`trace`: the caller's span, continued here
while tracing is on: `serving.tracing`) and its outcome goes back as `("ok", value)` or
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

from serving import tracing
from serving.config import TelemetryConfig
from serving.errors import OcrError
from serving.proc import release_free_heap
from serving.telemetry import setup_tracing
from serving.workers.sandbox import WorkerLimits

logger = logging.getLogger(__name__)

Call = tuple[Callable[..., Any], tuple[Any, ...], tracing.Carrier | None]


def cpu_worker_main(
    conn: Connection,
    initializer: Callable[..., None],
    initargs: tuple[Any, ...],
    limits: WorkerLimits | None = None,
    telemetry: TelemetryConfig | None = None,
    process_name: str = "cpu",
) -> None:
    """Process entry point (spawned by `serving.workers.cpu_pool`): unreadable to its uid at
    once, `limits` set once the initializer has run, the CPU time before each call
    (`serving.workers.sandbox`); with `telemetry`, the calls' spans are exported as
    `process_name`'s."""
    limits = limits or WorkerLimits()
    limits.seal()
    initializer(*initargs)
    if telemetry is not None:
        setup_tracing(telemetry, process=process_name)
    limits.apply()
    conn.send(("ready", None))
    try:
        _serve(conn, limits)
    finally:
        tracing.shutdown()  # this worker's last spans are sent


def _serve(conn: Connection, limits: WorkerLimits) -> None:
    while True:
        try:
            message: Call | None = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if message is None:
            return
        fn, args, *rest = message  # a bare `(fn, args)` (tests) runs untraced
        limits.arm_task()
        try:
            with tracing.continued(rest[0] if rest else None, f"cpu_worker {fn.__name__}"):
                reply: tuple[str, Any] = ("ok", fn(*args))
        except Exception as err:  # every failure goes back to the caller, never kills the loop
            reply = ("error", err)
        _send(conn, reply)
        del message, fn, args, rest, reply
        release_free_heap()


def _send(conn: Connection, reply: tuple[str, Any]) -> None:
    try:
        conn.send(reply)
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        # An exception (or value) that does not pickle still gets an answer to its caller.
        logger.exception("a CPU stage's outcome could not be sent back")
        conn.send(("error", OcrError(f"unpicklable outcome: {err}")))
