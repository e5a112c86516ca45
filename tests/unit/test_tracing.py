"""`serving.tracing` off (free: nothing of the SDK loaded, one shared no-op) and on (an in-memory
exporter stands in for OTLP here; tests/e2e/test_traces.py receives the real export)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from serving import telemetry, tracing
from serving.config import TelemetryConfig

pytestmark = pytest.mark.unit


@dataclass
class Item:
    trace: Any
    enqueued_at: float


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    assert telemetry.setup_tracing(
        TelemetryConfig(export_delay_ms=1.0), process="test", exporter=exporter
    )
    try:
        yield exporter
    finally:
        tracing.shutdown()


def test_off_every_call_is_the_same_no_op() -> None:
    assert not tracing.enabled()
    assert tracing.span("a") is tracing.span("b", {"k": 1})
    assert tracing.continued({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}, "x") is (
        tracing.span("a")
    )
    assert tracing.batch_span("device.batch", [Item(None, 0.0)], 1.0) is tracing.span("a")
    assert tracing.carrier() is None
    assert tracing.current() is None
    assert tracing.current_trace_id() is None
    assert not telemetry.setup_tracing(TelemetryConfig(), process="main")


def test_off_the_server_never_loads_the_sdk() -> None:
    """Importing the app, the service and the workers, and a request's spans, with tracing off:
    `opentelemetry.sdk` is never imported (the MCP SDK's use of the API aside)."""
    code = (
        "import sys; import serving.app, serving.cli, serving.workers.cpu_worker\n"
        "from serving import tracing\n"
        "with tracing.span('a'): assert tracing.carrier() is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_a_carried_context_continues_in_another_process(
    exported: InMemorySpanExporter,
) -> None:
    with tracing.span("cpu prepare_page_of") as caller:
        sent = tracing.carrier()
        trace_id = tracing.current_trace_id()
    assert sent is not None
    assert set(sent) == {"traceparent"}
    with tracing.continued(sent, "cpu_worker prepare_page_of", stage="prepare"):
        assert tracing.current_trace_id() == trace_id
    tracing.shutdown()
    (worker,) = [s for s in exported.get_finished_spans() if s.name.startswith("cpu_worker")]
    assert worker.parent is not None
    assert worker.parent.span_id == caller.get_span_context().span_id
    assert format(worker.context.trace_id, "032x") == trace_id


def test_a_batch_is_a_root_linked_to_each_items_wait(exported: InMemorySpanExporter) -> None:
    now = time.monotonic()
    items = []
    for name in ("request a", "request b"):
        with tracing.span(name):
            items.append(Item(tracing.current(), now - 0.5))
    items.append(Item(None, now))  # an untraced item: no wait span, no link
    with tracing.batch_span("device.batch", items, now, **{"ocr.stage": "rec"}):
        pass
    tracing.shutdown()
    spans = {s.name: s for s in exported.get_finished_spans()}
    waits = [s for s in exported.get_finished_spans() if s.name == "queue.wait rec"]
    assert len(waits) == 2
    requests = {spans["request a"].context.span_id, spans["request b"].context.span_id}
    assert {w.parent.span_id for w in waits if w.parent} == requests
    assert all(0.45 < (w.end_time - w.start_time) / 1e9 < 1.0 for w in waits)
    batch = spans["device.batch"]
    assert batch.parent is None
    assert {link.context.span_id for link in batch.links} == {w.context.span_id for w in waits}
    assert batch.attributes is not None
    assert batch.attributes["ocr.batch.items"] == 3


def test_a_batch_is_kept_when_a_request_in_it_is(exported: InMemorySpanExporter) -> None:
    """Roots are sampled at `sample_ratio`; a batch linked to a kept request is kept anyway."""
    tracing.shutdown()
    exporter = InMemorySpanExporter()
    telemetry.setup_tracing(
        TelemetryConfig(sample_ratio=0.0, export_delay_ms=1.0), process="t", exporter=exporter
    )
    sampled = {"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}
    with tracing.continued(sampled, "kept"):
        kept = Item(tracing.current(), time.monotonic())
    with tracing.span("dropped"):
        dropped = Item(tracing.current(), time.monotonic())
    with tracing.batch_span("device.batch", [dropped], time.monotonic()):
        pass
    with tracing.batch_span("device.batch", [kept, dropped], time.monotonic()):
        pass
    tracing.shutdown()
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["device.batch", "kept", "queue.wait"]


def test_the_config_refuses_what_is_not_an_endpoint() -> None:
    from serving.errors import ConfigError

    with pytest.raises(ConfigError, match=r"telemetry\.otlp_endpoint"):
        TelemetryConfig(otlp_endpoint="collector:4318")
    with pytest.raises(ConfigError, match=r"telemetry\.sample_ratio"):
        TelemetryConfig(sample_ratio=1.5)
    assert TelemetryConfig(otlp_endpoint="http://collector:4318/v1/traces").enabled


def test_log_lines_carry_the_trace_id(exported: InMemorySpanExporter) -> None:
    import json
    import logging

    from serving.log_config import JsonFormatter, RequestIdFilter

    inside = logging.LogRecord("t", logging.INFO, __file__, 1, "in a span", None, None)
    outside = logging.LogRecord("t", logging.INFO, __file__, 1, "outside", None, None)
    with tracing.span("request"):
        RequestIdFilter().filter(inside)
        trace_id = tracing.current_trace_id()
    RequestIdFilter().filter(outside)
    assert trace_id
    assert inside.trace_tag == f" trace={trace_id}"
    assert json.loads(JsonFormatter().format(inside))["trace_id"] == trace_id
    assert outside.trace_tag == ""  # type: ignore[attr-defined]
    assert "trace_id" not in json.loads(JsonFormatter().format(outside))
