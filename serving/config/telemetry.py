"""`[telemetry]`: OpenTelemetry traces, exported over OTLP/HTTP; off unless an endpoint is set."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from serving.config.checks import check


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetryConfig:
    """Traces of requests and job pages across the server's processes (docs/tracing.md)."""

    otlp_endpoint: str = ""
    """OTLP/HTTP traces URL every process exports its spans to (a collector's
    `http://HOST:4318/v1/traces`); empty: tracing off, and nothing of the OpenTelemetry SDK is
    loaded or called."""
    service_name: str = "ocr-serving"
    """The spans' `service.name`."""
    sample_ratio: float = 1.0
    """Share of the traces started here (no sampled `traceparent` sent) that are recorded; a
    sent `traceparent`'s sampled flag decides for its own trace."""
    export_delay_ms: float = 5000.0
    """How long finished spans wait to be sent with others, at most (the batch span processor's
    schedule delay)."""
    export_timeout_s: float = 10.0
    """One export's time limit; a collector that does not answer within it loses those spans,
    never a request."""

    @property
    def enabled(self) -> bool:
        """Whether spans are recorded and exported."""
        return bool(self.otlp_endpoint)

    def __post_init__(self) -> None:
        url = urllib.parse.urlsplit(self.otlp_endpoint)
        check(
            not self.otlp_endpoint or (url.scheme in ("http", "https") and bool(url.netloc)),
            "telemetry.otlp_endpoint",
            "must be empty (off) or an http(s) URL",
        )
        check(bool(self.service_name), "telemetry.service_name", "must not be empty")
        check(0 <= self.sample_ratio <= 1, "telemetry.sample_ratio", "must be >= 0 and <= 1")
        check(self.export_delay_ms > 0, "telemetry.export_delay_ms", "must be > 0")
        check(self.export_timeout_s > 0, "telemetry.export_timeout_s", "must be > 0")
