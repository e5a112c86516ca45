"""`ocr-batch`'s plan, one for its three drivers (in process, `--server`, `--ray`).

The inputs (files, folders walked for known suffixes, globs) become documents, each sniffed,
counted and hashed; the output folder's manifest is opened and read; and the pages it does not
hold become the to-do list, each (file sha256, page) once however often its file is named, in the
order of the inputs. A driver runs the to-do list into the manifest, then writes the outputs.
"""

from __future__ import annotations

import glob
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.batch.manifest import BatchDocument, Manifest, PageKey, file_sha256
from serving.decode.documents import count_pages
from serving.decode.readers import FileKind, sniff_kind
from serving.errors import OcrError

SUFFIXES = frozenset((".pdf", ".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".gif"))
"""What a directory walk picks up; files named explicitly are recognised by content."""

PageTodo = tuple[BatchDocument, int]
"""A page to OCR: its document and page index."""


class BatchError(Exception):
    """A problem that stops the run; the message is for the user."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What a run has to do."""

    documents: list[BatchDocument]
    problems: list[str]
    """A line for each input file that is not a document (skipped)."""
    pages: int
    """Distinct pages in the documents (a file named twice counts once)."""
    todo: list[PageTodo]
    """The pages the manifest does not hold, each once, in input order."""

    @property
    def skipped(self) -> int:
        """Pages already done (in the manifest with the same options)."""
        return self.pages - len(self.todo)

    def text(self) -> str:
        """The plan in one line for the user."""
        return (
            f"{len(self.documents)} documents, {self.pages} pages: {len(self.todo)} to do, "
            f"{self.skipped} skipped (already done)"
        )


def open_plan(
    inputs: Sequence[str],
    out: Path,
    options: dict[str, Any],
    say: Callable[[str], None],
    warn: Callable[[str], None] | None = None,
) -> tuple[Plan, Manifest]:
    """The plan for `inputs` into the folder `out` (created), and its manifest, read (the caller
    closes it). Each problem goes to `warn` (default: `say`), then the plan line to `say`.

    Raises:
        BatchError: no document among the inputs.
        FileNotFoundError: an input names nothing.
    """
    documents, problems = find_documents(inputs)
    for problem in problems:
        (warn or say)(problem)
    if not documents:
        raise BatchError("no document to OCR")
    out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(out, options)
    manifest.load()
    todo: dict[PageKey, PageTodo] = {}
    for doc in documents:
        for key in doc.page_keys():
            if not manifest.done(key):
                todo.setdefault(key, (doc, key[1]))
    pages = len({key for doc in documents for key in doc.page_keys()})
    plan = Plan(documents=documents, problems=problems, pages=pages, todo=list(todo.values()))
    say(plan.text())
    return plan, manifest


def find_documents(specs: Iterable[str]) -> tuple[list[BatchDocument], list[str]]:
    """The documents named by `specs`, and a problem line for each file that is not one."""
    documents, problems = [], []
    for name, path in find_inputs(specs):
        kind = sniff_file(path)
        if kind is None:
            problems.append(f"{name}: neither a PDF nor a supported image; skipped")
            continue
        try:
            pages = count_pages(path, kind)
        except OcrError as err:
            problems.append(f"{name}: {err.message}; skipped")
            continue
        digest = file_sha256(path)
        documents.append(BatchDocument(name=name, path=path, kind=kind, pages=pages, sha256=digest))
    return documents, problems


def find_inputs(specs: Iterable[str]) -> list[tuple[str, Path]]:
    """(display name, path) of every document named by files, directories or glob patterns.

    A directory is walked recursively for known suffixes; its files are named relative to it.
    """
    found: dict[Path, str] = {}
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.suffix.lower() in SUFFIXES:
                    found.setdefault(child.resolve(), child.relative_to(path).as_posix())
        elif path.is_file():
            found.setdefault(path.resolve(), path.name)
        else:
            matches = sorted(glob.glob(spec, recursive=True))
            if not matches:
                raise FileNotFoundError(f"{spec}: no such file, directory or match")
            for match in matches:
                if Path(match).is_file():
                    found.setdefault(Path(match).resolve(), match)
    return [(name, path) for path, name in found.items()]


def sniff_file(path: Path) -> FileKind | None:
    """The kind of a file on disk, from its first bytes."""
    with path.open("rb") as f:
        return sniff_kind(f.read(1024))
