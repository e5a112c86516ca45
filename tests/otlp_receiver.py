"""A real OTLP/HTTP traces receiver for the tests: an HTTP server that decodes each
`ExportTraceServiceRequest` (protobuf, as the OpenTelemetry exporters send it) with
opentelemetry-proto and keeps every span with its resource's attributes."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

PATH = "/v1/traces"


@dataclass(frozen=True)
class Span:
    """One received span: ids as hex, as `traceparent` writes them."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    links: tuple[tuple[str, str], ...]
    """(trace id, span id) of each link."""
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass
class Receiver:
    url: str
    spans: list[Span] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self) -> list[Span]:
        with self.lock:
            return list(self.spans)

    def wait_for(self, done: Callable[[list[Span]], bool], timeout_s: float = 20.0) -> list[Span]:
        """The spans received once `done(spans)` holds; raises TimeoutError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            spans = self.received()
            if done(spans):
                return spans
            time.sleep(0.1)
        raise TimeoutError(f"{len(self.received())} spans received: {self.received()}")


@contextmanager
def receiving() -> Iterator[Receiver]:
    """A receiver on a free loopback port, for the block's length."""
    spans: list[Span] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != PATH or self.headers.get("content-type") != "application/x-protobuf":
                self.send_error(404)
                return
            request = ExportTraceServiceRequest.FromString(body)
            found = [
                Span(
                    name=span.name,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                    attributes=_attributes(span.attributes),
                    resource=_attributes(resource_spans.resource.attributes),
                )
                for resource_spans in request.resource_spans
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            ]
            with lock:
                spans.extend(found)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_port}{PATH}", spans, lock)
    finally:
        server.shutdown()
        server.server_close()
