"""Errors that carry their HTTP status; picklable, since they cross process boundaries."""

from __future__ import annotations


class OcrError(Exception):
    """Base error: a 500 with a safe message."""

    http_status: int = 500
    code: str = "internal"
    default_message: str = "Internal server error"

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)

    def __reduce__(self) -> tuple[type[OcrError], tuple[str]]:
        return (type(self), (self.message,))


class InvalidInput(OcrError):
    """Undecodable image or PDF, bad base64, a page over the limits."""

    http_status = 422
    code = "invalid_input"
    default_message = "Invalid input file"


class ValidationFailed(OcrError):
    """A request field is missing, has the wrong type or is out of range."""

    http_status = 422
    code = "validation_failed"
    default_message = "Invalid request"


class UnsupportedMediaType(OcrError):
    """A content type this endpoint does not accept."""

    http_status = 415
    code = "unsupported_media"
    default_message = "Unsupported media type"


class NotAcceptable(OcrError):
    """No output format this endpoint makes matches the request's `Accept` header."""

    http_status = 406
    code = "not_acceptable"
    default_message = "No acceptable output format"


class PayloadTooLarge(OcrError):
    """The request body is over `server.max_body_bytes`."""

    http_status = 413
    code = "payload_too_large"
    default_message = "Request body too large"


class ClientGone(OcrError):
    """The client disconnected before the answer was ready, or mid-upload (nginx's 499).

    Nobody reads the answer: it is counted in the metrics and logged at INFO, not as a failure.
    """

    http_status = 499
    code = "client_closed_request"
    default_message = "Client closed the request"


class UploadTimeout(OcrError):
    """The request body stalled, or did not arrive whole in time (slow or stalled upload)."""

    http_status = 408
    code = "upload_timeout"
    default_message = "Request body not received in time"


class Overloaded(OcrError):
    """Queues are full: the client should retry later (503 with Retry-After)."""

    http_status = 503
    code = "overloaded"
    default_message = "Server overloaded, retry later"

    def __init__(self, message: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        """How long the server expects room to take to come back, where its state says
        (`serving.scheduling.retry_after`); None: unknown."""

    def __reduce__(self) -> tuple[type[OcrError], tuple[str, float | None]]:  # type: ignore[override]
        return (type(self), (self.message, self.retry_after_s))


class QuotaExceeded(OcrError):
    """An API key went past its own quota (429 with `Retry-After`); other keys are unaffected."""

    http_status = 429
    code = "quota_exceeded"
    default_message = "Quota exceeded, retry later"

    def __init__(self, message: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        """When to try again; None: the server's `server.retry_after_s`."""

    def __reduce__(self) -> tuple[type[OcrError], tuple[str, float | None]]:  # type: ignore[override]
        return (type(self), (self.message, self.retry_after_s))


class StoredQuotaExceeded(QuotaExceeded):
    """An API key holds its most jobs, stored bytes or stored pages (429): it may submit again
    once it deletes jobs or they expire (`jobs.retention_s`)."""

    code = "stored_quota_exceeded"
    default_message = "This key stores its most jobs; delete some or wait for them to expire"


class InsufficientStorage(OcrError):
    """The disk an upload would go to is too full to take it (507); nothing was written."""

    http_status = 507
    code = "insufficient_storage"
    default_message = "Not enough free disk space for this upload; retry later"


class DeadlineExceeded(OcrError):
    """The request did not finish within `server.request_timeout_s`."""

    http_status = 504
    code = "deadline_exceeded"
    default_message = "Request timed out"


class PredictorFailed(OcrError):
    """Inference raised; details are logged, not returned."""

    http_status = 500
    code = "predictor_failed"
    default_message = "Inference failed"


class WorkerUnavailable(OcrError):
    """A worker process died while holding this work, and the one retry is spent."""

    http_status = 503
    code = "worker_unavailable"
    default_message = "Worker unavailable, retry later"


class ShuttingDown(OcrError):
    """The server is stopping and this work cannot finish within the shutdown grace."""

    http_status = 503
    code = "shutting_down"
    default_message = "Server is shutting down, retry later"


class NotReady(OcrError):
    """Models are still loading or warming up."""

    http_status = 503
    code = "not_ready"
    default_message = "Models are not loaded yet"


class ConfigError(ValueError):
    """An invalid configuration value; the message names its TOML path."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"{path}: {problem}")
