"""What a job asked for besides its OCR: a signed call when it ends (and, if asked, when each of
its documents does), and where its results go (an `s3://` prefix, or presigned PUT URLs). Kept
with the job in the store (a JSON column) and carried out by the outbox (`serving.jobs.outbox`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

from serving.errors import ValidationFailed
from serving.jobs.destinations import DestinationPolicy, check_url
from serving.jobs.storage.locations import parse_s3_url
from serving.outputs.formats import EXTENSIONS, FORMATS, Format

EVENTS = ("job", "document")
"""What a callback may be sent for: the job's end (`job.succeeded`, `job.failed`,
`job.cancelled`), each document's (`document.completed`)."""
RESULTS_NAME = "results.jsonl"
"""The object every export writes: one line per page in document order, as `GET /results`."""
FIELDS = ("callback_url", "callback_events", "input", "output", "output_urls", "output_formats")
"""The `POST /v1/jobs` form fields that fill `JobHooks` (`input`: `serving.jobs.storage`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobHooks:
    """A job's callback and export, as submitted (checked: `parse_hooks`)."""

    callback_url: str | None = None
    events: tuple[str, ...] = ("job",)
    output: str | None = None
    """`s3://bucket/prefix/`: every output is written under it."""
    output_urls: Mapping[str, str] = field(default_factory=dict)
    """Output name (`results.jsonl`, `NAME.EXT`) to a presigned PUT URL: each is written there."""
    output_formats: tuple[Format, ...] = ("json",)
    """The formats each document is exported in."""

    @property
    def exports(self) -> bool:
        """Whether the job's results are written somewhere when it ends."""
        return bool(self.output or self.output_urls)

    @property
    def wanted(self) -> bool:
        """Whether there is anything to do when the job (or one of its documents) ends."""
        return self.callback_url is not None or self.exports

    def calls(self, event: str) -> bool:
        """Whether the callback is sent for `event` ("job" or "document")."""
        return self.callback_url is not None and event in self.events

    def to_json(self) -> dict[str, Any]:
        """As stored with the job."""
        return {
            "callback_url": self.callback_url,
            "events": list(self.events),
            "output": self.output,
            "output_urls": dict(self.output_urls),
            "output_formats": list(self.output_formats),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> JobHooks:
        """As `to_json` stored it (None: a job with no hooks)."""
        if not data:
            return cls()
        return cls(
            callback_url=data.get("callback_url"),
            events=tuple(data.get("events", ("job",))),
            output=data.get("output"),
            output_urls=dict(data.get("output_urls", {})),
            output_formats=tuple(
                cast(Format, f) for f in data.get("output_formats", ("json",)) if f in FORMATS
            ),
        )

    def public_json(self) -> dict[str, Any]:
        """What `GET /v1/jobs/{id}` shows: the URLs without their query strings (a presigned
        URL's signature is a credential)."""
        body: dict[str, Any] = {}
        if self.callback_url is not None:
            body["callback"] = {"url": _no_query(self.callback_url), "events": list(self.events)}
        if self.exports:
            body["output"] = {
                "location": self.output,
                "urls": {name: _no_query(url) for name, url in self.output_urls.items()},
                "formats": list(self.output_formats),
            }
        return body


def parse_hooks(
    fields: Mapping[str, Sequence[str]],
    *,
    callbacks: DestinationPolicy,
    presigned: DestinationPolicy,
) -> JobHooks:
    """The hooks a submit's form fields ask for (`FIELDS` but `input`; each at most once),
    checked against the deployment's policies.

    Raises:
        ValidationFailed: a field given twice, a URL or host not allowed, an unknown event or
            format, or `output_urls` that is not a JSON object of URLs.
    """
    one = {name: _one(fields, name) for name in FIELDS if name != "input"}
    callback = one["callback_url"]
    if callback is not None:
        check_url(callback, callbacks, "callback_url")
    events = _names(one["callback_events"] or "job", EVENTS, "callback_events")
    if one["callback_events"] is not None and callback is None:
        raise ValidationFailed("callback_events needs a callback_url")
    output = one["output"]
    if output is not None:
        location = parse_s3_url(output, "output")
        output = f"s3://{location.bucket}/{location.folder}"
    urls = _output_urls(one["output_urls"], presigned)
    if output is not None and urls:
        raise ValidationFailed("Give output (s3://) or output_urls (presigned PUT URLs), not both")
    formats = cast(
        tuple[Format, ...], _names(one["output_formats"] or "json", FORMATS, "output_formats")
    )
    if one["output_formats"] is not None and output is None and not urls:
        raise ValidationFailed("output_formats needs an output or output_urls")
    return JobHooks(
        callback_url=callback,
        events=events,
        output=output,
        output_urls=urls,
        output_formats=formats,
    )


def output_names(documents: Sequence[str], fmt: Format) -> list[str]:
    """Each document's output name in `fmt`, as the archive names its members: the document's
    name (a zip's folders kept, no `..`) with the format's extension, its index in front where
    another document has the same name."""
    taken: set[str] = set()
    names = []
    for index, document in enumerate(documents):
        parts = [p for p in PurePosixPath(document).parts if p not in ("/", "..", ".")]
        name = f"{'/'.join(parts) or 'document'}.{EXTENSIONS[fmt]}"
        if name in taken:
            name = f"{index}-{name}"
        taken.add(name)
        names.append(name)
    return names


def exported_names(hooks: JobHooks, documents: Sequence[str]) -> list[str]:
    """Every output a job with these documents exports: the results, then each document in
    each format."""
    return [RESULTS_NAME, *(n for f in hooks.output_formats for n in output_names(documents, f))]


def check_output_names(hooks: JobHooks, produced: Sequence[str]) -> None:
    """Refuse `output_urls` naming an output the job will not make.

    Raises:
        ValidationFailed: naming the unknown names and what the job makes.
    """
    unknown = [name for name in hooks.output_urls if name not in produced]
    if unknown:
        listed = ", ".join(repr(name) for name in unknown[:5])
        makes = ", ".join(repr(name) for name in produced[:10])
        raise ValidationFailed(f"output_urls names {listed}, which this job does not make: {makes}")


def _one(fields: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = fields.get(name, ())
    if len(values) > 1:
        raise ValidationFailed(f"Give {name} at most once")
    return values[0].strip() if values else None


def _names(text: str, known: Sequence[str], what: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValidationFailed(
            f"{what}: {', '.join(unknown) or 'none given'}; one or more of "
            f"{', '.join(known)}, comma-separated"
        )
    return names


def _output_urls(text: str | None, policy: DestinationPolicy) -> dict[str, str]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ValidationFailed(f"output_urls is not JSON: {err}") from err
    if not isinstance(value, dict) or not value:
        raise ValidationFailed("output_urls must be a JSON object of output names to PUT URLs")
    for name, url in value.items():
        if not isinstance(url, str) or not name:
            raise ValidationFailed("output_urls: each output name maps to a presigned PUT URL")
        check_url(url, policy, f"output_urls[{name!r}]")
    return dict(value)


def _no_query(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
