"""serving/log_config.py: a text log line is one line whatever a client put in the message (a
`%0a` in a path); JSON lines escape by themselves."""

from __future__ import annotations

import json
import logging

import pytest

from serving.config import AppConfig, describe
from serving.log_config import (
    JsonFormatter,
    TextFormatter,
    configure_logging,
    escape_controls,
    log_effective_config,
    read_effective_config,
)

FORMAT = "%(levelname)s %(name)s: %(message)s"
FORGED = "/x\n2026-12-04 21:00:00 INFO [main] - serving.access: GET / 200 1.0ms"


def _record(message: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("serving.access", logging.INFO, __file__, 1, message, args, None)


def test_a_newline_in_an_argument_stays_on_the_line() -> None:
    line = TextFormatter(FORMAT).format(_record("%s %s %d", "GET", FORGED, 404))
    assert "\n" not in line
    assert line == "INFO serving.access: GET /x\\n2026-12-04 21:00:00 INFO [main] - " + (
        "serving.access: GET / 200 1.0ms 404"
    )


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("a\rb", "a\\rb"),
        ("a\x1b[31mb", "a\\x1b[31mb"),  # a terminal's colour escape
        ("a\x85b\u2028c", "a\\x85b\\u2028c"),  # NEL and LINE SEPARATOR, line breaks elsewhere
        ("a\x00b\x7f", "a\\x00b\\x7f"),
        ("tab\tand ünïcödé 中文", "tab\tand ünïcödé 中文"),
    ],
)
def test_control_characters_are_escaped(raw: str, escaped: str) -> None:
    assert escape_controls(raw) == escaped


def test_a_traceback_keeps_its_lines_and_the_record_is_left_as_it_was() -> None:
    try:
        raise ValueError("boom")
    except ValueError as err:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "failed %s", ("a\nb",), (type(err), err, None)
        )
    text = TextFormatter(FORMAT).format(record)
    assert text.splitlines()[0] == "ERROR x: failed a\\nb"
    assert "ValueError: boom" in text
    assert record.message == "failed a\nb"  # other handlers would see the message as logged


def test_json_lines_stay_one_line() -> None:
    line = JsonFormatter().format(_record("%s", FORGED))
    assert "\n" not in line
    assert json.loads(line)["message"] == FORGED


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_effective_configuration_is_logged_readably_and_read_back(
    log_format: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was one line of about 3 KB: now one line per section, or one JSON record holding
    the object, and `read_effective_config` reads either back."""
    data = describe(AppConfig())
    configure_logging("info", log_format=log_format)
    log_effective_config(logging.getLogger("serving"), data, log_format)
    logged = capsys.readouterr().err
    lines = [line for line in logged.splitlines() if "effective configuration" in line]
    if log_format == "text":
        assert len(lines) == len(data)  # one per section
        server = f"effective configuration [server]: {json.dumps(data['server'])}"
        assert any(line.endswith(server) for line in lines)
    else:
        (line,) = lines
        assert json.loads(line)["config"] == json.loads(json.dumps(data))
    assert read_effective_config(logged) == json.loads(json.dumps(data))
