"""ALTO v4 (https://www.loc.gov/standards/alto/): `Page`, `PrintSpace`, `TextBlock`,
`TextLine` and `String` with `HPOS`, `VPOS`, `WIDTH`, `HEIGHT` (pixels) and `WC` (0 to 1),
in reading order; `SP` where the line's text has a space between two words. A page scanned askew
has its skew as `ROTATION` (on the `Page` and each `TextBlock`, degrees counter-clockwise), and
each `TextLine` its `BASELINE` ("x1,y1 x2,y2", ALTO 4.2's points, at the page's skew:
`serving.outputs.baselines`).

Written a page at a time with the standard library's XML serialiser.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator

from serving.outputs.baselines import baseline
from serving.outputs.document import Box, Document, Line, Page

MEDIA_TYPE = "application/alto+xml; charset=utf-8"
NAMESPACE = "http://www.loc.gov/standards/alto/ns-v4#"
SCHEMA_LOCATION = "http://www.loc.gov/standards/alto/v4/alto-4-4.xsd"


def _position(box: Box) -> dict[str, str]:
    x0, y0, x1, y1 = box
    return {
        "HPOS": str(x0),
        "VPOS": str(y0),
        "WIDTH": str(max(0, x1 - x0)),
        "HEIGHT": str(max(0, y1 - y0)),
    }


def render(document: Document, system: str = "ocr-serving") -> Iterator[bytes]:
    """The document as one ALTO file, a page at a time (UTF-8)."""
    description = ET.Element("Description")
    ET.SubElement(description, "MeasurementUnit").text = "pixel"
    image = ET.SubElement(description, "sourceImageInformation")
    ET.SubElement(image, "fileName").text = document.name
    processing = ET.SubElement(description, "Processing", {"ID": "processing_0"})
    software = ET.SubElement(processing, "processingSoftware")
    ET.SubElement(software, "softwareName").text = system
    yield (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<alto xmlns="{NAMESPACE}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'
        f' xsi:schemaLocation="{NAMESPACE} {SCHEMA_LOCATION}">\n'
    ).encode()
    yield ET.tostring(description, encoding="unicode").encode() + b"\n<Layout>\n"
    for number, page in enumerate(document.pages, start=1):
        yield ET.tostring(page_element(page, number), encoding="unicode").encode() + b"\n"
    yield b"</Layout>\n</alto>\n"


def _rotation(angle_deg: float) -> dict[str, str]:
    """`ROTATION` (degrees counter-clockwise) where the text is turned; nothing when level."""
    return {"ROTATION": f"{angle_deg:g}"} if angle_deg else {}


def page_element(page: Page, number: int) -> ET.Element:
    """One `Page`; `number` counts from 1 and makes the elements' IDs unique."""
    element = ET.Element(
        "Page",
        {
            "ID": f"page_{number}",
            "PHYSICAL_IMG_NR": str(number),
            "WIDTH": str(page.width),
            "HEIGHT": str(page.height),
            **_rotation(page.skew),
        },
    )
    space = ET.SubElement(
        element,
        "PrintSpace",
        {"ID": f"space_{number}", **_position((0, 0, page.width, page.height))},
    )
    lines = words = 0
    for b, block in enumerate(page.blocks, start=1):
        text_block = ET.SubElement(
            space,
            "TextBlock",
            {"ID": f"block_{number}_{b}", **_position(block.box), **_rotation(page.skew)},
        )
        for line in block.lines:
            lines += 1
            words = _line(text_block, line, f"{number}_{lines}", number, words, page.skew)
    return element


def _baseline(line: Line, skew_deg: float) -> str:
    """The line's `BASELINE`: its two ends, "x1,y1 x2,y2" (`serving.outputs.baselines`)."""
    base = baseline(line, skew_deg)
    (x0, y0), (x1, y1) = base.origin, base.end
    return f"{round(x0)},{round(y0)} {round(x1)},{round(y1)}"


def _line(block: ET.Element, line: Line, tag: str, page: int, words: int, skew_deg: float) -> int:
    attributes = {"ID": f"line_{tag}", **_position(line.box)}
    if line.words:
        attributes["BASELINE"] = _baseline(line, skew_deg)
    element = ET.SubElement(block, "TextLine", attributes)
    position = 0
    for i, word in enumerate(line.words):
        start = line.text.find(word.text, position)
        if i and (start > position or start < 0):
            ET.SubElement(element, "SP")
        position = (start if start >= 0 else position) + len(word.text)
        words += 1
        ET.SubElement(
            element,
            "String",
            {
                "ID": f"string_{page}_{words}",
                "CONTENT": word.text,
                **_position(word.box),
                "WC": f"{min(1.0, max(0.0, word.score)):.4f}",
            },
        )
    return words
