"""Plain text: each page's lines in reading order, a blank line between blocks, a form feed
between pages (as `pdftotext` separates them)."""

from __future__ import annotations

from collections.abc import Iterator

from serving.outputs.document import Document, Page

MEDIA_TYPE = "text/plain; charset=utf-8"


def page_text(page: Page) -> str:
    """One page's text: a line a line, blocks apart by a blank line."""
    return "\n\n".join("\n".join(line.text for line in block.lines) for block in page.blocks)


def render(document: Document) -> Iterator[bytes]:
    """The document's text, a page at a time (UTF-8)."""
    for i, page in enumerate(document.pages):
        yield (("\f" if i else "") + page_text(page) + "\n").encode()
