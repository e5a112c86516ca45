"""`ocr-batch`'s output folder: the manifest of pages done, and the result files written from it.

The manifest (`manifest.jsonl`) gets one line per page as soon as the page is done, flushed to
disk: its file's sha256, the page, the options it ran with and its result. A rerun with the same
options skips every (sha256, page) listed there, so no page is OCR'd twice; a line cut short by a
kill is dropped. The outputs (`results.jsonl`, or a `.json` per document; the other formats:
`serving.batch.outputs`) are written from the manifest at the end of each run, in document
order, and left alone when unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Literal

from serving.decode.readers import FileKind

logger = logging.getLogger(__name__)

MANIFEST = "manifest.jsonl"
RESULTS = "results.jsonl"

OutputFormat = Literal["jsonl", "json"]
"""The formats written from the records alone (the others: `serving.batch.outputs`)."""
PageKey = tuple[str, int]
"""(file sha256, page index)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchDocument:
    """One input document."""

    name: str
    path: Path
    kind: FileKind
    pages: int
    sha256: str

    def page_keys(self) -> list[PageKey]:
        """Its pages' manifest keys."""
        return [(self.sha256, page) for page in range(self.pages)]


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class Manifest:
    """Pages done in an output folder, with their results."""

    def __init__(self, out: Path, options: dict[str, Any]) -> None:
        self.path = out / MANIFEST
        self.options = options
        self.records: dict[PageKey, dict[str, Any]] = {}
        self._file: IO[bytes] | None = None

    def load(self) -> None:
        """Read the pages already done with these options; drop a line cut short by a kill."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) < len(data):
            logger.warning("dropping an unfinished last line of %s", self.path)
            os.truncate(self.path, len(complete))
        for number, raw in enumerate(complete.splitlines(), 1):
            try:
                entry = json.loads(raw)
                key = (str(entry["sha256"]), int(entry["page"]))
                record = dict(entry["record"])
            except (ValueError, KeyError, TypeError):
                logger.warning("%s:%d: not a manifest entry; ignored", self.path, number)
                continue
            if entry.get("options", {}) == self.options:
                self.records[key] = record

    def done(self, key: PageKey) -> bool:
        """Whether this page is done with these options."""
        return key in self.records

    def append(self, key: PageKey, record: dict[str, Any], *, sync: bool = True) -> None:
        """Record a page as done, on disk before this returns (with `sync=False`: once `sync()`
        is called, so that a block of pages costs one fsync)."""
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("ab")
        entry = {"sha256": key[0], "page": key[1], "options": self.options, "record": record}
        self._file.write(json.dumps(entry, ensure_ascii=False).encode() + b"\n")
        self.records[key] = record
        if sync:
            self.sync()

    def sync(self) -> None:
        """Put the pages appended so far on disk."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the manifest file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def write_outputs(
    out: Path,
    fmt: OutputFormat,
    documents: list[BatchDocument],
    manifest: Manifest,
    failures: dict[PageKey, dict[str, Any]],
) -> list[Path]:
    """Write the results of `documents` from the manifest; returns the files that changed."""
    if fmt == "jsonl":
        lines = [
            json.dumps(entry, ensure_ascii=False)
            for doc in documents
            for entry in _pages(doc, manifest, failures, with_file=True)
        ]
        target = out / RESULTS
        return [target] if _write_if_changed(target, "".join(f"{ln}\n" for ln in lines)) else []
    changed = []
    for doc in documents:
        pages = list(_pages(doc, manifest, failures, with_file=False))
        body = {"file": doc.name, "sha256": doc.sha256, "pages": pages}
        text = json.dumps(body, ensure_ascii=False, indent=1) + "\n"
        target = out / f"{safe_relative(doc.name)}.{fmt}"
        if _write_if_changed(target, text):
            changed.append(target)
    return changed


def _pages(
    doc: BatchDocument,
    manifest: Manifest,
    failures: dict[PageKey, dict[str, Any]],
    *,
    with_file: bool,
) -> list[dict[str, Any]]:
    head = {"file": doc.name, "sha256": doc.sha256} if with_file else {}
    entries = []
    for key in doc.page_keys():
        record = manifest.records.get(key)
        if record is not None:
            body = {k: v for k, v in record.items() if k not in ("file", "sha256")}
        else:
            error = failures.get(key, {"code": "not_done", "message": "Not OCR'd yet"})
            body = {"page": key[1], "error": error}
        entries.append({**head, **body})
    return entries


def safe_relative(name: str) -> PurePosixPath:
    """An input's name as a path inside the output folder (no root, no `..`)."""
    parts = [p for p in PurePosixPath(name).parts if p not in ("/", "..", ".")]
    return PurePosixPath(*parts) if parts else PurePosixPath("document")


def _write_if_changed(path: Path, text: str) -> bool:
    data = text.encode()
    if path.exists() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True
