"""hOCR 1.2 (http://kba.github.io/hocr-spec/1.2/): `ocr_page`, `ocr_carea`, `ocr_par`,
`ocr_line` and `ocrx_word` elements with their `bbox`, words with `x_wconf`, in reading order.

Each block is one `ocr_carea` holding one `ocr_par`. Each line's `baseline` runs at the page's
skew (`serving.outputs.baselines`: a page scanned askew has sloping baselines, which OCRmyPDF's
renderer follows); a line set sideways has its `textangle`. Words a space apart in the line's
text are a space apart in the `ocr_line`; CJK runs next to other text are not, so the text of
each line reads back unchanged. Written a page at a time with the standard library's XML serialiser.
"""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from collections.abc import Iterator

from pipelines.skew import MAX_DEG
from serving.outputs.baselines import baseline
from serving.outputs.document import Box, Document, Line, Page

MEDIA_TYPE = "text/vnd.hocr+html; charset=utf-8"
_XHTML = "http://www.w3.org/1999/xhtml"
CAPABILITIES = "ocr_page ocr_carea ocr_par ocr_line ocrx_word ocrp_wconf"


def _bbox(box: Box) -> str:
    return "bbox {} {} {} {}".format(*box)


def render(document: Document, system: str = "ocr-serving") -> Iterator[bytes]:
    """The document as one hOCR file, a page at a time (UTF-8)."""
    title = html.escape(document.name, quote=True)
    yield (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"'
        ' "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
        f'<html xmlns="{_XHTML}" xml:lang="en" lang="en">\n<head>\n'
        f"<title>{title}</title>\n"
        '<meta http-equiv="Content-Type" content="text/html;charset=utf-8"/>\n'
        f'<meta name="ocr-system" content="{html.escape(system, quote=True)}"/>\n'
        f'<meta name="ocr-capabilities" content="{CAPABILITIES}"/>\n'
        f'<meta name="ocr-number-of-pages" content="{len(document.pages)}"/>\n'
        "</head>\n<body>\n"
    ).encode()
    for number, page in enumerate(document.pages, start=1):
        yield ET.tostring(page_element(page, number, document.name), encoding="unicode").encode()
        yield b"\n"
    yield b"</body>\n</html>\n"


def page_element(page: Page, number: int, image: str) -> ET.Element:
    """One `ocr_page` div; `number` counts from 1 and makes the elements' ids unique."""
    image_name = image.replace('"', "")
    div = ET.Element(
        "div",
        {
            "class": "ocr_page",
            "id": f"page_{number}",
            "title": f'image "{image_name}"; {_bbox((0, 0, page.width, page.height))}; '
            f"ppageno {number - 1}",
        },
    )
    div.text = "\n"
    counts = {"block": 0, "line": 0, "word": 0}
    for block in page.blocks:
        counts["block"] += 1
        tag = f"{number}_{counts['block']}"
        carea = ET.SubElement(
            div, "div", {"class": "ocr_carea", "id": f"block_{tag}", "title": _bbox(block.box)}
        )
        par = ET.SubElement(
            carea, "p", {"class": "ocr_par", "id": f"par_{tag}", "title": _bbox(block.box)}
        )
        carea.tail = "\n"
        for line in block.lines:
            counts["line"] += 1
            _line(par, line, f"{number}_{counts['line']}", counts, page.skew)
    return div


def line_title(line: Line, skew_deg: float) -> str:
    """An `ocr_line`'s title: its `bbox` and `baseline` (slope, and the baseline's offset from
    the box's bottom at its left edge, pixels, y down: `serving.outputs.baselines`); a line set
    sideways on the page has its `textangle` instead (degrees counter-clockwise)."""
    base = baseline(line, skew_deg)
    if abs(base.angle_deg - skew_deg) > MAX_DEG:
        return f"{_bbox(line.box)}; textangle {round(base.angle_deg) % 360}"
    ux, uy = base.direction
    slope = uy / ux
    offset = base.origin[1] + (line.box[0] - base.origin[0]) * slope - line.box[3]
    return f"{_bbox(line.box)}; baseline {round(slope, 4) + 0.0:g} {round(offset)}"


def _line(par: ET.Element, line: Line, tag: str, counts: dict[str, int], skew: float) -> None:
    span = ET.SubElement(
        par,
        "span",
        {"class": "ocr_line", "id": f"line_{tag}", "title": line_title(line, skew)},
    )
    span.tail = "\n"
    position = 0
    previous: ET.Element | None = None
    for word in line.words:
        start = line.text.find(word.text, position)
        gap = " " if start > position or (start < 0 and previous is not None) else ""
        position = (start if start >= 0 else position) + len(word.text)
        if previous is not None:
            previous.tail = gap
        counts["word"] += 1
        previous = ET.SubElement(
            span,
            "span",
            {
                "class": "ocrx_word",
                "id": f"word_{tag.split('_')[0]}_{counts['word']}",
                "title": f"{_bbox(word.box)}; x_wconf {round(100 * word.score)}",
            },
        )
        previous.text = word.text
