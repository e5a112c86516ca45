"""One logging configuration for the server and its worker processes: text or JSON lines."""

from __future__ import annotations

import json
import logging
import logging.config
import re
from datetime import UTC, datetime
from typing import Any

from serving import request_context, tracing

LEVELS = ("critical", "error", "warning", "info", "debug")
FORMATS = ("text", "json")


class RequestIdFilter(logging.Filter):
    """Stamps every record with the current request's id (`-` outside a request) and, while
    tracing is on (`serving.tracing`), the current trace's id."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Add `record.request_id`, `record.trace_id` (None outside a trace) and
        `record.trace_tag` (` trace=ID`, or empty); never drops a record."""
        if not hasattr(record, "request_id"):
            record.request_id = request_context.current() or "-"
        trace_id = getattr(record, "trace_id", None) or tracing.current_trace_id()
        record.trace_id = trace_id
        record.trace_tag = f" trace={trace_id}" if trace_id else ""
        return True


_ESCAPES = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))}
_ESCAPES |= {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\t"}  # a tab stays a tab
_ESCAPES |= {0x2028: "\\u2028", 0x2029: "\\u2029"}  # Unicode's line and paragraph separators


def escape_controls(text: str) -> str:
    """`text` with line breaks and other control characters written as escapes (`\\n`,
    `\\x1b`), so that what a client sent (a path with `%0a`, a file name) cannot start a log
    line of its own or drive a terminal."""
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """The readable format, one line per record: the message's control characters escaped
    (a traceback, added below it, keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The format applied to the record, its message escaped."""
        message = record.message
        record.message = escape_controls(message)
        try:
            return super().formatMessage(record)
        finally:
            record.message = message


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, process, logger, request id, message, traceback."""

    def __init__(self, process_name: str = "main") -> None:
        super().__init__()
        self.process_name = process_name

    def format(self, record: logging.LogRecord) -> str:
        """The record as a single line of JSON."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "process": self.process_name,
            "pid": record.process,
            "logger": record.name,
            "request_id": getattr(record, "request_id", "-"),
            "message": record.getMessage(),
        }
        trace_id = getattr(record, "trace_id", None)
        if trace_id:
            entry["trace_id"] = trace_id
        config = getattr(record, "config", None)
        if config is not None:  # `log_effective_config`'s object
            entry["config"] = config
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


EFFECTIVE_CONFIG = "effective configuration"
"""What the start-up record(s) of the configuration say (`log_effective_config`)."""
_SECTION = re.compile(rf"{EFFECTIVE_CONFIG} \[(\w+)\]: (\{{.*\}})$")


def log_effective_config(logger: logging.Logger, data: dict[str, Any], log_format: str) -> None:
    """The effective configuration at start, readably: in text logs one line per section
    (`effective configuration [engine]: {...}`), in JSON logs one record whose `config` is the
    whole object. It was one line of about 3 KB."""
    if log_format == "json":
        logger.info(EFFECTIVE_CONFIG, extra={"config": data})
        return
    for section, values in data.items():
        logger.info("%s [%s]: %s", EFFECTIVE_CONFIG, section, json.dumps(values))


def read_effective_config(log_text: str) -> dict[str, Any] | None:
    """The configuration a server logged at start (`log_effective_config`, either format), or
    None when its log has none."""
    data: dict[str, Any] = {}
    for line in log_text.splitlines():
        if EFFECTIVE_CONFIG not in line:
            continue
        if line.startswith("{"):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("config"), dict):
                return dict(entry["config"])
            continue
        found = _SECTION.search(line)
        if found is not None:
            try:
                data[found.group(1)] = json.loads(found.group(2))
            except json.JSONDecodeError:
                return None
    return data or None


def configure_logging(
    level: str = "info", *, process_name: str = "main", log_format: str = "text"
) -> None:
    """Log to stderr: readable lines ("text"), or JSON lines ("json"), each naming its process
    and carrying the request id, and the trace id while tracing is on."""
    if log_format not in FORMATS:
        raise ValueError(f"log_format must be one of {', '.join(FORMATS)}, got {log_format!r}")
    ids = "%(request_id)s%(trace_tag)s"
    text = f"%(asctime)s %(levelname)s [{process_name}] {ids} %(name)s: %(message)s"
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "filters": {"request_id": {"()": RequestIdFilter}},
            "formatters": {
                "text": {"()": TextFormatter, "fmt": text},
                "json": {"()": JsonFormatter, "process_name": process_name},
            },
            "handlers": {
                "stderr": {
                    "class": "logging.StreamHandler",
                    "formatter": log_format,
                    "filters": ["request_id"],
                },
            },
            "root": {"handlers": ["stderr"], "level": level.upper()},
            # httpx logs each request's whole URL at INFO: a presigned URL's signature, a
            # callback's token. Our modules log what they send, without the query.
            "loggers": {"httpx": {"level": "WARNING"}},
        }
    )
