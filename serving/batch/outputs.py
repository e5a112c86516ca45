"""`ocr-batch --format`: what the output folder gets once a run ends, from the manifest.

- `jsonl`: `results.jsonl`, one line per page; `json`: a `.json` per document with its pages
  (`serving.batch.manifest.write_outputs`).
- `txt`, `hocr`, `alto`, `pdf`: one file per document (`NAME.txt`, `NAME.hocr`, `NAME.alto.xml`,
  `NAME.pdf` beside the input's relative name), made by the server's renderers
  (`serving.outputs`) from the pages' records, their lines in reading order: plain text, hOCR
  1.2, ALTO v4, and a searchable PDF built on the input itself (its images as they are, a PDF's
  own pages with the text layer grafted on). A page that failed keeps its place without text.

Each document's file is written again only when what it is made from changed (its pages'
records, its input file, the format): a fingerprint per file is kept in `OUT/.outputs.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal, get_args

from serving.batch.manifest import BatchDocument, Manifest, PageKey, safe_relative
from serving.batch.manifest import write_outputs as write_records
from serving.config import InputConfig
from serving.jobs.document_files import limits_of, write_document
from serving.outputs.document import TextMode
from serving.outputs.formats import EXTENSIONS, Format

BatchFormat = Literal["jsonl", "json", "txt", "hocr", "alto", "pdf"]
BATCH_FORMATS: tuple[BatchFormat, ...] = get_args(BatchFormat)
_RENDERED: dict[str, Format] = {"txt": "text", "hocr": "hocr", "alto": "alto", "pdf": "pdf"}
"""`--format` values made by a renderer, and the renderer's name for each."""
FINGERPRINTS = ".outputs.json"


def write_outputs(
    out: Path,
    fmt: BatchFormat,
    documents: list[BatchDocument],
    manifest: Manifest,
    failures: dict[PageKey, dict[str, Any]],
    *,
    inputs: InputConfig | None = None,
    mode: TextMode = "skip",
    deskew: bool = False,
) -> list[Path]:
    """Write the results of `documents` in `fmt`; returns the files that changed. `inputs`
    sizes the pages that have no record (the config's `[input]`; default: its defaults);
    `mode`: what a PDF made from a PDF does with its pages that have text; `deskew`: a PDF's
    pages straightened."""
    if fmt == "jsonl" or fmt == "json":
        return write_records(out, fmt, documents, manifest, failures)
    rendered = _RENDERED[fmt]
    limits = limits_of(inputs or InputConfig())
    index_path = out / FINGERPRINTS
    known: dict[str, str] = json.loads(index_path.read_text()) if index_path.exists() else {}
    changed = []
    for doc in documents:
        records = [
            manifest.records.get(key) or {"error": failures.get(key) or {"code": "not_done"}}
            for key in doc.page_keys()
        ]
        target = out / f"{safe_relative(doc.name)}.{EXTENSIONS[rendered]}"
        relative = target.relative_to(out).as_posix()
        variant = f"{fmt}.{mode}{'.deskew' if deskew else ''}" if fmt == "pdf" else fmt
        fingerprint = _fingerprint(doc, variant, records)
        if known.get(relative) == fingerprint and target.exists():
            continue
        write_document(
            target,
            rendered,
            name=doc.name,
            records=records,
            kind=doc.kind,
            pages=doc.pages,
            source=doc.path,
            limits=limits,
            mode=mode,
            deskew=deskew,
        )
        known[relative] = fingerprint
        changed.append(target)
    if changed:
        tmp = index_path.with_name(f"{FINGERPRINTS}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, index_path)
    return changed


def _fingerprint(doc: BatchDocument, fmt: str, records: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256(f"{fmt}\n{doc.sha256}\n{doc.name}\n".encode())
    for record in records:
        digest.update(json.dumps(record, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    return digest.hexdigest()
