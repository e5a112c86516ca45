"""Load-test inputs: the images and PDFs a run sends, read once into memory in a fixed order."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["CONTENT_TYPES", "Document", "DocumentKind", "load_documents"]

DocumentKind = Literal["image", "pdf"]

CONTENT_TYPES: dict[str, str] = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".bmp": "image/bmp",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
}
"""Content type by file suffix (lower case); only these suffixes are load-test inputs."""


@dataclass(frozen=True, slots=True)
class Document:
    """One input file.

    Attributes:
        name: The file's path as given (or found in a given directory), for reports.
        data: The file's bytes.
        kind: ``"pdf"`` or ``"image"``.
        content_type: The MIME type sent by the v1 API.
    """

    name: str
    data: bytes
    kind: DocumentKind
    content_type: str


def _read(path: Path) -> Document:
    content_type = CONTENT_TYPES[path.suffix.lower()]
    kind: DocumentKind = "pdf" if content_type == "application/pdf" else "image"
    return Document(name=str(path), data=path.read_bytes(), kind=kind, content_type=content_type)


def load_documents(paths: Iterable[str | Path]) -> list[Document]:
    """Read the documents a run cycles through.

    Args:
        paths: Files and directories. A directory contributes its supported files (see
            ``CONTENT_TYPES``), recursively, sorted by path; files keep the order given.

    Returns:
        The documents, in the order requests will use them.

    Raises:
        ValueError: A path does not exist, a file has an unsupported suffix, or nothing was found.
    """
    documents: list[Document] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in CONTENT_TYPES
            )
            documents.extend(_read(p) for p in found)
        elif path.is_file():
            if path.suffix.lower() not in CONTENT_TYPES:
                supported = " ".join(sorted(CONTENT_TYPES))
                raise ValueError(f"{path}: unsupported file type (supported: {supported})")
            documents.append(_read(path))
        else:
            raise ValueError(f"{path}: no such file or directory")
    if not documents:
        raise ValueError("no input documents found (images or PDFs)")
    return documents
