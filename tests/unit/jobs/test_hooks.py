"""serving/jobs/hooks.py: a submit's callback and export fields, checked against the
deployment's policies; the outputs' names; what a job shows of them."""

from __future__ import annotations

import json

import pytest

from serving.errors import ValidationFailed
from serving.jobs.destinations import DestinationPolicy
from serving.jobs.hooks import JobHooks, check_output_names, exported_names, parse_hooks

CALLBACKS = DestinationPolicy(
    allowed_hosts=("hooks.example",), allow_private=False, setting="webhooks.allowed_hosts"
)
PRESIGNED = DestinationPolicy(
    allowed_hosts=("s3.example",), allow_private=False, setting="storage.url_allowed_hosts"
)


def _parse(**fields: str | list[str]) -> JobHooks:
    given = {k: v if isinstance(v, list) else [v] for k, v in fields.items()}
    return parse_hooks(given, callbacks=CALLBACKS, presigned=PRESIGNED)


def test_a_callback_and_an_s3_output_are_read() -> None:
    hooks = _parse(
        callback_url="https://hooks.example/ocr?token=t",
        callback_events="job, document",
        output="s3://my-bucket/results",
        output_formats="json,pdf",
    )
    assert hooks.callback_url == "https://hooks.example/ocr?token=t"
    assert hooks.events == ("job", "document")
    assert hooks.output == "s3://my-bucket/results/"  # a prefix: outputs go under it
    assert hooks.output_formats == ("json", "pdf")
    assert JobHooks.from_json(json.loads(json.dumps(hooks.to_json()))) == hooks
    shown = hooks.public_json()
    assert shown["callback"]["url"] == "https://hooks.example/ocr"  # no query: it may be a token


def test_nothing_asked_is_no_hooks() -> None:
    assert not _parse().wanted
    assert _parse().events == ("job",)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"callback_url": "https://evil.example/x"}, "webhooks.allowed_hosts"),
        ({"callback_url": "https://user:pw@hooks.example/x"}, "credentials"),
        ({"callback_url": "file:///etc/passwd"}, "only http and https"),
        ({"callback_url": ["https://hooks.example/a", "https://hooks.example/b"]}, "at most once"),
        ({"callback_url": "https://hooks.example/a", "callback_events": "page"}, "callback_events"),
        ({"callback_events": "job"}, "needs a callback_url"),
        ({"output": "s3://Bad_Bucket/x"}, "not an S3 bucket name"),
        ({"output": "s3://bucket/../x"}, "'..'"),
        ({"output": "https://bucket.example/x"}, "expected s3://"),
        ({"output_formats": "json"}, "needs an output"),
        ({"output": "s3://bucket/x", "output_formats": "docx"}, "output_formats"),
        ({"output_urls": "[1]"}, "JSON object"),
        ({"output_urls": '{"results.jsonl": "https://elsewhere.example/put"}'}, "url_allowed"),
        (
            {"output": "s3://bucket/x", "output_urls": '{"a": "https://s3.example/a"}'},
            "not both",
        ),
    ],
)
def test_what_the_deployment_does_not_allow_is_refused(
    fields: dict[str, str | list[str]], says: str
) -> None:
    with pytest.raises(ValidationFailed) as caught:
        _parse(**fields)
    assert says in caught.value.message


def test_output_names_are_the_archives_and_unknown_urls_are_refused() -> None:
    hooks = JobHooks(output_urls={"scan.png.json": "https://s3.example/put"})
    documents = ["scan.png", "batch.zip/a/scan.png", "../scan.png"]
    assert exported_names(hooks, documents) == [
        "results.jsonl",
        "scan.png.json",
        "batch.zip/a/scan.png.json",
        "2-scan.png.json",  # the same name as the first: its index in front
    ]
    check_output_names(hooks, exported_names(hooks, documents))
    wrong = JobHooks(output_urls={"scan.pdf": "https://s3.example/put"})
    with pytest.raises(ValidationFailed, match=r"'scan\.pdf'"):
        check_output_names(wrong, exported_names(wrong, documents))
