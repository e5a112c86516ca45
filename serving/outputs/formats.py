"""The output formats, how a request chooses one, and rendering a document in it.

`?format=` wins; otherwise the `Accept` header is matched against each format's media types
(quality values honoured, `*/*` and a missing header give JSON). JSON is rendered by the
endpoints themselves (it carries more than a `Document`: PaddleOCR's line order, scaling notes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal, get_args

from serving.errors import NotAcceptable, ValidationFailed
from serving.outputs import alto, hocr, text
from serving.outputs.document import Document

PDF_MEDIA_TYPE = "application/pdf"

Format = Literal["json", "text", "hocr", "alto", "pdf"]
FORMATS: tuple[Format, ...] = get_args(Format)

MEDIA_TYPES: dict[Format, str] = {
    "json": "application/json",
    "text": text.MEDIA_TYPE,
    "hocr": hocr.MEDIA_TYPE,
    "alto": alto.MEDIA_TYPE,
    "pdf": PDF_MEDIA_TYPE,
}
"""What each format is answered as (Content-Type)."""

EXTENSIONS: dict[Format, str] = {
    "json": "json",
    "text": "txt",
    "hocr": "hocr",
    "alto": "alto.xml",
    "pdf": "pdf",
}
"""File name extension for each format (downloads, archives)."""

_ACCEPTED: dict[str, Format] = {
    "application/json": "json",
    "text/plain": "text",
    "text/vnd.hocr+html": "hocr",
    "application/alto+xml": "alto",
    "application/xml": "alto",
    "text/xml": "alto",
    "application/pdf": "pdf",
}
"""Media types a client may ask for in `Accept`, and the format each gets."""


def _render_pdf(document: Document) -> Iterator[bytes]:
    """`serving.outputs.pdf.render`, imported at the first PDF: its libraries (fpdf, fontTools,
    HarfBuzz, pikepdf) took 0.17 s of every server process's start, most of which never
    renders a PDF (2026-12-07)."""
    from serving.outputs import pdf

    return pdf.render(document)


_RENDERERS: dict[Format, Callable[[Document], Iterator[bytes]]] = {
    "text": text.render,
    "hocr": hocr.render,
    "alto": alto.render,
    "pdf": _render_pdf,
}


def parse_format(value: str) -> Format:
    """A `format` parameter's value.

    Raises:
        ValidationFailed: not one of `FORMATS`.
    """
    normalised = value.strip().lower()
    if normalised == "txt":
        return "text"
    for fmt in FORMATS:
        if fmt == normalised:
            return fmt
    raise ValidationFailed(f"format must be one of {', '.join(FORMATS)}; got {value!r}")


def negotiate(format_param: str | None, accept_header: str | None) -> Format:
    """The format a request asks for: its `format` parameter, else its `Accept` header.

    Raises:
        ValidationFailed: the `format` parameter names no format (422).
        NotAcceptable: the `Accept` header names media types, none of which is made here (406).
    """
    if format_param is not None:
        return parse_format(format_param)
    if not accept_header or not accept_header.strip():
        return "json"
    best: tuple[float, int, Format] | None = None
    for position, part in enumerate(accept_header.split(",")):
        media, *params = (p.strip() for p in part.split(";"))
        media = media.lower()
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if quality <= 0:
            continue
        if media in ("*/*", "application/*"):
            fmt: Format | None = "json"
        elif media == "text/*":
            fmt = "text"
        else:
            fmt = _ACCEPTED.get(media)
        if fmt is not None and (best is None or (quality, -position) > (best[0], best[1])):
            best = (quality, -position, fmt)
    if best is None:
        accepted = ", ".join(sorted(_ACCEPTED))
        raise NotAcceptable(f"Accept: {accept_header!r}; this endpoint answers {accepted}")
    return best[2]


def render(document: Document, fmt: Format) -> Iterator[bytes]:
    """The document in `fmt` (not JSON), in pieces to stream.

    Raises:
        ValueError: `fmt` is "json".
    """
    if fmt == "json":
        raise ValueError("JSON is rendered by the endpoint, not from a Document")
    return _RENDERERS[fmt](document)


def render_bytes(document: Document, fmt: Format) -> bytes:
    """`render`, joined: what a CPU worker hands back."""
    return b"".join(render(document, fmt))
