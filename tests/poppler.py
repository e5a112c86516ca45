"""poppler-utils (and qpdf), the real readers of the PDFs the tests make: `scripts/system-deps.sh`
installs them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

needs_poppler = pytest.mark.skipif(
    shutil.which("pdftotext") is None or shutil.which("qpdf") is None,
    reason="poppler-utils and qpdf (scripts/system-deps.sh)",
)


def pdftotext(pdf: bytes, *args: str) -> str:
    """The text poppler reads from `pdf`, with `pdftotext`'s extra `args` (e.g. "-bbox")."""
    return subprocess.run(
        ["pdftotext", *args, "-", "-"], input=pdf, capture_output=True, check=True
    ).stdout.decode()


def pdfimages(path: Path) -> list[list[str]]:
    """`pdfimages -list`'s rows, split into columns."""
    listing = subprocess.run(
        ["pdfimages", "-list", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return [row.split() for row in listing.splitlines()[2:] if row.strip()]
