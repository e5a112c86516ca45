"""A stored document's OCR written out as one file in an output format: a batch job's document
(`GET /v1/jobs/{id}/documents/{n}`, the archive) and an `ocr-batch` output folder's.

Both keep each page as its record (the native `/v1/ocr` page: `page`, `width`, `height`, `lines`
with their `words`), and the original upload, which the PDF is built on. A page without a record
(it failed, or a cancelled job never ran it) comes out without text, at its size as the pipeline
decodes it (from the file's headers), so a PDF keeps every page of its document.

`write_stored` is what a CPU worker runs for the server: it reads the records from a file the
server wrote, so no document's results cross the worker pipe, and writes the output next to it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from pipelines.layout import reading_order
from pipelines.skew import estimate_skew, level_boxes
from serving.config import InputConfig
from serving.decode import documents
from serving.decode.readers import DecodeLimits, FileKind, image_page_sizes
from serving.outputs.document import Document, Page, Source, TextMode, page_from_json
from serving.outputs.formats import Format, render

PageRecord = Mapping[str, Any]
"""One page's stored result (`serving.jobs.options.page_record`), or an error entry."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredDocument:
    """A document to write, as a CPU worker gets it (picklable, paths only)."""

    name: str
    kind: FileKind
    pages: int
    source: str | None
    """The original upload; None when it is gone (the PDF then has blank pages)."""
    records: str
    """A JSONL file: one line per page in page order, its record, or `null` when it has none."""
    dest: str
    fmt: Format
    limits: DecodeLimits
    mode: TextMode = "skip"
    """A PDF from a PDF: what its pages that have text get (`serving.outputs.pdf_text`)."""
    deskew: bool = False
    """A PDF: its pages straightened, their text layers with them (`serving.outputs.deskew`)."""


def limits_of(config: InputConfig) -> DecodeLimits:
    """The decode limits `[input]` sets, which size a page that has no record."""
    return DecodeLimits(
        max_pdf_pages=config.max_pdf_pages,
        pdf_render_scale=config.pdf_render_scale,
        max_image_pixels=config.max_image_pixels,
        max_frames_per_document=config.max_frames_per_document,
        max_page_side_px=config.max_page_side_px,
    )


SOURCE_BYTES_PER_PX = 16
"""What embedding an image upload's page in a PDF holds for each of its pixels as sent: the frame
decoded, converted and re-packed by fpdf2 (14.6 B/px measured for an RGB PNG, 11 for a TIFF
beyond its bytes, which are charged apart)."""


def source_pixels(source: str, kind: FileKind, pages: int, limits: DecodeLimits) -> int:
    """The largest page of a stored image upload in pixels as sent, which a PDF embeds whole,
    read from its headers (a CPU worker's call: the upload is untrusted); 0 for a PDF, whose
    pages are grafted, not drawn, and for an upload that is gone.

    Raises:
        InvalidInput: the headers do not read.
    """
    if kind == "pdf" or not Path(source).exists():
        return 0
    data = Path(source).read_bytes()
    every = dataclasses.replace(limits, max_pdf_pages=max(pages, 1), max_page_side_px=0)
    return max(width * height for width, height in image_page_sizes(data, every))


def write_stored(task: StoredDocument) -> int:
    """Write `task.dest` from its records file (a CPU worker's call); returns its size in bytes."""
    with open(task.records, "rb") as file:
        records = [json.loads(line) for line in file]
    return write_document(
        Path(task.dest),
        task.fmt,
        name=task.name,
        records=records,
        kind=task.kind,
        pages=task.pages,
        source=task.source,
        limits=task.limits,
        mode=task.mode,
        deskew=task.deskew,
    )


def write_document(
    dest: Path,
    fmt: Format,
    *,
    name: str,
    records: Sequence[PageRecord | None],
    kind: FileKind,
    pages: int,
    source: str | Path | None,
    limits: DecodeLimits,
    mode: TextMode = "skip",
    deskew: bool = False,
) -> int:
    """Write one document in `fmt` to `dest` (whole or not at all: through a temporary file);
    returns its size in bytes. `records[i]` is page i's record, None (or an error entry) when
    the page has none."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as file:
            for chunk in _chunks(fmt, name, records, kind, pages, source, limits, mode, deskew):
                file.write(chunk)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest.stat().st_size


def _chunks(
    fmt: Format,
    name: str,
    records: Sequence[PageRecord | None],
    kind: FileKind,
    pages: int,
    source: str | Path | None,
    limits: DecodeLimits,
    mode: TextMode,
    deskew: bool = False,
) -> Iterable[bytes]:
    if fmt == "json":
        return [json_document(name, records, pages)]
    document = Document(
        name=Path(name).name,
        pages=tuple(_pages(records, kind, pages, source, limits)),
        source=_source(source, kind),
        mode=mode,
        deskew=deskew,
    )
    return render(document, fmt)


def json_document(name: str, records: Sequence[PageRecord | None], pages: int) -> bytes:
    """The document as JSON: `{"name", "pages"}`, each page its record (lines in PaddleOCR's
    order, with their words) and its `blocks` in reading order (indices into `lines`), or
    `{"page", "error"}`."""
    out = []
    for index in range(pages):
        record = records[index] if index < len(records) else None
        if record is None or "lines" not in record:
            error = (record or {}).get("error") or {"code": "not_done", "message": "Not OCR'd"}
            out.append({"page": index, "error": error})
            continue
        body = {k: v for k, v in record.items() if k not in ("file", "file_index", "sha256")}
        polys = [line["box"] for line in record["lines"]]
        skew = float(record["skew"]) if "skew" in record else estimate_skew(polys)
        # Ordered as the page reads levelled (an askew page's lines interleaved otherwise).
        boxes = level_boxes(polys, skew)
        body["blocks"] = [{"lines": members} for members in reading_order(boxes)]
        out.append(body)
    return json.dumps({"name": name, "pages": out}, ensure_ascii=False).encode() + b"\n"


def _pages(
    records: Sequence[PageRecord | None],
    kind: FileKind,
    pages: int,
    source: str | Path | None,
    limits: DecodeLimits,
) -> Iterable[Page]:
    for index in range(pages):
        record = records[index] if index < len(records) else None
        if record is not None and "lines" in record:
            yield page_from_json(record, index=index)
            continue
        width, height = _page_size(source, kind, index, limits)
        yield Page(width=width, height=height, blocks=(), index=index)


def _page_size(
    source: str | Path | None, kind: FileKind, index: int, limits: DecodeLimits
) -> tuple[int, int]:
    """A page's size as the pipeline decodes it, from the file's headers; 1 x 1 without it."""
    if source is None or not Path(source).exists():
        return 1, 1
    ((width, height),) = documents.page_sizes(str(source), kind, limits, index=index)
    return width, height


def _source(source: str | Path | None, kind: FileKind) -> Source | None:
    if source is None or not Path(source).exists():
        return None
    if kind == "pdf":
        return Source(media_type="application/pdf", path=str(source))
    with Image.open(source) as image:
        media_type = image.get_format_mimetype() or "application/octet-stream"
    return Source(media_type=media_type, path=str(source))
