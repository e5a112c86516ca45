"""Tracing set up in one process from `[telemetry]`: the OpenTelemetry SDK, its sampler and the
OTLP/HTTP exporter, installed into `serving.tracing`. The main process and every CPU worker call
`setup_tracing` once, each naming itself in its spans' resource; nothing here runs while
`telemetry.otlp_endpoint` is empty."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from serving import tracing
from serving.config import TelemetryConfig

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

logger = logging.getLogger(__name__)

MISSING_EXTRA = (
    "telemetry.otlp_endpoint is set but OpenTelemetry is not installed: "
    "pip install 'ocr-serving[otel]'"
)


def setup_tracing(
    config: TelemetryConfig, *, process: str, exporter: SpanExporter | None = None
) -> bool:
    """Record and export this process's spans, named `process` (`main`, `cpu-0`) in their
    resource, when `config` enables tracing; returns whether it did.

    `exporter` replaces the OTLP one (tests).

    Raises:
        RuntimeError: tracing is enabled and the `otel` extra is not installed.
    """
    if not config.enabled and exporter is None:
        return False
    try:
        from opentelemetry import propagate, trace
        from opentelemetry.propagators.composite import CompositePropagator
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError as err:
        raise RuntimeError(MISSING_EXTRA) from err
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=config.otlp_endpoint, timeout=config.export_timeout_s)
    resource = Resource.create(
        {
            "service.name": config.service_name,
            "process.pid": os.getpid(),
            "ocr.process": process,
        }
    )
    provider = TracerProvider(resource=resource, sampler=_sampler(config.sample_ratio))
    provider.add_span_processor(
        BatchSpanProcessor(exporter, schedule_delay_millis=config.export_delay_ms)
    )
    # W3C trace context only: what `traceparent` says, whatever OTEL_PROPAGATORS holds.
    propagate.set_global_textmap(CompositePropagator([TraceContextTextMapPropagator()]))
    trace.set_tracer_provider(provider)  # libraries' spans too (the MCP SDK's)
    tracing.install(provider)
    logger.debug("tracing to %s as %s", config.otlp_endpoint, process)
    return True


def _sampler(ratio: float) -> Any:
    """Parent-based: a sent `traceparent` decides for its trace; a root (a request without one,
    a job page) is kept at `ratio`, and a device batch whenever a request it serves is kept."""
    from opentelemetry.sdk.trace.sampling import (
        Decision,
        ParentBased,
        Sampler,
        SamplingResult,
        TraceIdRatioBased,
    )

    class LinkedOrRatio(Sampler):
        """Keeps a root span linked to a kept span (a batch), else `ratio` of them."""

        def __init__(self) -> None:
            self._ratio = TraceIdRatioBased(ratio)

        def should_sample(
            self,
            parent_context: Any,
            trace_id: int,
            name: str,
            kind: Any = None,
            attributes: Any = None,
            links: Sequence[Any] | None = None,
            trace_state: Any = None,
        ) -> SamplingResult:
            if any(link.context.trace_flags.sampled for link in links or ()):
                return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
            return self._ratio.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )

        def get_description(self) -> str:
            return f"LinkedOrRatio{{{ratio}}}"

    return ParentBased(root=LinkedOrRatio())
