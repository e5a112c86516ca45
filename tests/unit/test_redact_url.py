"""serving/config/jobs.py's `redact_url`: a PostgreSQL URL's secrets never reach a log line,
wherever libpq would read them from."""

from __future__ import annotations

import pytest

from serving.config import AppConfig, JobsConfig, describe, redact_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://ocr:s3cret@db:5432/ocr", "postgresql://ocr:***@db:5432/ocr"),
        ("postgresql://ocr@db/ocr?password=s3cret", "postgresql://ocr@db/ocr?password=***"),
        (
            "postgresql://ocr@/ocr?host=/run/pg&password=s3cret&sslmode=disable",
            "postgresql://ocr@/ocr?host=/run/pg&password=***&sslmode=disable",
        ),
        ("postgresql://db/ocr?sslpassword=s3cret", "postgresql://db/ocr?sslpassword=***"),
        # libpq percent-decodes parameter names: `pass%77ord` is `password`.
        ("postgresql://db/ocr?pass%77ord=s3cret", "postgresql://db/ocr?pass%77ord=***"),
        ("postgresql://db/ocr?PASSWORD=s3cret", "postgresql://db/ocr?PASSWORD=***"),
        (
            "postgresql://u:a@db/ocr?password=b&password=c",
            "postgresql://u:***@db/ocr?password=***&password=***",
        ),
        # Nothing secret: unchanged.
        ("postgresql://ocr@db/ocr?sslmode=require", "postgresql://ocr@db/ocr?sslmode=require"),
        ("sqlite", "sqlite"),
    ],
)
def test_secrets_are_replaced(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_a_url_that_does_not_parse_is_hidden_whole() -> None:
    assert redact_url("postgresql://[db/ocr?password=s3cret") == "***"


def test_the_logged_configuration_hides_a_query_password() -> None:
    config = AppConfig(jobs=JobsConfig(store="postgresql://ocr@db/ocr?password=s3cret"))
    assert "s3cret" not in str(describe(config))
    assert describe(config)["jobs"]["store"] == "postgresql://ocr@db/ocr?password=***"
