"""Spans of a request or a job page across the server's processes (OpenTelemetry), and nothing at
all while tracing is off.

Every layer calls the few functions here; they reach OpenTelemetry only once `install` has run
(`serving.telemetry.setup_tracing`, when `[telemetry] otlp_endpoint` is set). Off, `span()` hands
back one shared no-op context manager and `carrier()` None: no SDK is loaded, no object is made
(docs/tracing.md measures it).

A trace crosses to a worker process explicitly, as a request's id would: `carrier()` (the W3C
`traceparent`) travels in the work item and the worker continues it with `continued()`. A batch
of the device queues serves many requests: its span is a root of its own, linked to each
request's wait in the queue (`batch_span`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

Carrier = dict[str, str]
"""A span's context as W3C trace-context headers (`traceparent`, `tracestate`): small, pickled."""

_NOOP: AbstractContextManager[None] = contextlib.nullcontext()

_tracer: Tracer | None = None
_provider: TracerProvider | None = None


class Queued(Protocol):
    """What `batch_span` reads of a batch's items (`serving.scheduling.batching.WorkItem`)."""

    @property
    def trace(self) -> Any: ...

    @property
    def enqueued_at(self) -> float: ...


def install(provider: TracerProvider) -> None:
    """Record spans through `provider` from now on, in this process."""
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer("serving")


def shutdown() -> None:
    """Send what is still buffered and stop recording (a process's last act)."""
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    if provider is not None:
        provider.shutdown()


def enabled() -> bool:
    """Whether spans are recorded in this process."""
    return _tracer is not None


def span(name: str, attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[Any]:
    """A span around the block, a child of the current one; a shared no-op when off."""
    if _tracer is None:
        return _NOOP
    return _tracer.start_as_current_span(name, attributes=attributes)


def current() -> Context | None:
    """This task's trace context, to parent work done later elsewhere (a queued item's wait);
    None when off."""
    if _tracer is None:
        return None
    from opentelemetry import context

    return context.get_current()


def carrier() -> Carrier | None:
    """The current span's context as W3C headers, to send to another process; None when off or
    outside a span."""
    if _tracer is None:
        return None
    from opentelemetry.propagate import inject

    headers: Carrier = {}
    inject(headers)
    return headers or None


def continued(sent: Carrier | None, name: str, **attributes: Any) -> AbstractContextManager[Any]:
    """A span around the block, a child of the span whose context another process `sent`; a
    no-op when off or when nothing was sent (the work is traced by no one)."""
    if _tracer is None or not sent:
        return _NOOP
    from opentelemetry.propagate import extract

    return _tracer.start_as_current_span(name, context=extract(sent), attributes=attributes)


@contextlib.contextmanager
def server_span(
    name: str, headers: Mapping[str, str], attributes: Mapping[str, Any]
) -> Iterator[Span | None]:
    """The span of one request received, continuing the trace of a `traceparent` it carries;
    yields None when off."""
    if _tracer is None:
        yield None
        return
    from opentelemetry.propagate import extract
    from opentelemetry.trace import SpanKind

    with _tracer.start_as_current_span(
        name, context=extract(headers), kind=SpanKind.SERVER, attributes=attributes
    ) as opened:
        yield opened


def root_span(name: str, **attributes: Any) -> AbstractContextManager[Any]:
    """A span that starts a trace of its own (a job page: no request waits for it)."""
    if _tracer is None:
        return _NOOP
    from opentelemetry.context import Context

    return _tracer.start_as_current_span(name, context=Context(), attributes=attributes)


def batch_span(
    name: str, items: Sequence[Queued], taken_at: float, **attributes: Any
) -> AbstractContextManager[Any]:
    """A device batch: first each traced item's wait in its queue (from `enqueued_at` to
    `taken_at`, `time.monotonic()` values) as a span of its own request's trace, then the batch's
    span around the block, a root linked to every one of those waits. A no-op when off."""
    if _tracer is None:
        return _NOOP
    from opentelemetry.context import Context
    from opentelemetry.trace import Link

    stage = attributes.get("ocr.stage", "")
    links = []
    for item in items:
        if item.trace is None:
            continue
        wait = _tracer.start_span(
            f"queue.wait {stage}".strip(),
            context=item.trace,
            start_time=_epoch_ns(item.enqueued_at),
            attributes={"ocr.stage": stage},
        )
        wait.end(end_time=_epoch_ns(taken_at))
        if wait.get_span_context().trace_flags.sampled:
            links.append(Link(wait.get_span_context()))
    return _tracer.start_as_current_span(
        name,
        context=Context(),
        links=links,
        start_time=_epoch_ns(taken_at),
        attributes={**attributes, "ocr.batch.items": len(items)},
    )


def current_trace_id() -> str | None:
    """The current trace's id (32 hex digits), for log lines; None when off or outside one."""
    if _tracer is None:
        return None
    from opentelemetry.trace import get_current_span

    found = get_current_span().get_span_context()
    return format(found.trace_id, "032x") if found.is_valid else None


def _epoch_ns(monotonic_s: float) -> int:
    """A `time.monotonic()` instant as nanoseconds since the epoch, as spans are stamped."""
    return time.time_ns() - int((time.monotonic() - monotonic_s) * 1e9)
