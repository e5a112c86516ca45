"""Our OCR as an OCRmyPDF 17 engine: each page image goes to `/v1/ocr?words=true&layout=true`
(a server, or the runtime in process), and the answer becomes OCRmyPDF's `OcrElement` tree:
paragraphs in reading order (the answer's `blocks`), their lines, and each line's words with the
boxes the recogniser's CTC alignment gives, so OCRmyPDF lays every word of the text layer on the
word as printed (no box estimated from character counts)."""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence, Set
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from ocrmypdf import OcrClass, OcrElement
from ocrmypdf._options import OcrOptions
from ocrmypdf.exceptions import MissingDependencyError
from ocrmypdf.hocrtransform import BoundingBox
from ocrmypdf.models.ocr_element import Baseline
from ocrmypdf.pluginspec import OcrEngine, OrientationConfidence
from PIL import Image

from pipelines.skew import MAX_DEG, estimate_skew
from serving.ocrmypdf_plugin.backend import backend_for
from serving.ocrmypdf_plugin.client import OcrServerError
from serving.outputs.baselines import DESCENT, baseline
from serving.outputs.document import Word, make_line
from serving.outputs.pdf_layer import LINE_LAYOUT, place_line

logger = logging.getLogger(__name__)

TESSERACT_CODES = {
    "eng": "en",
    "fra": "fr",
    "deu": "de",
    "spa": "es",
    "ita": "it",
    "por": "pt",
    "nld": "nl",
    "pol": "pl",
    "tur": "tr",
    "vie": "vi",
    "ces": "cs",
    "dan": "da",
    "fin": "fi",
    "swe": "sv",
    "nor": "no",
    "ron": "ro",
    "hun": "hu",
    "rus": "ru",
    "ukr": "uk",
    "chi_sim": "ch",
    "chi_tra": "chinese_cht",
    "jpn": "japan",
    "kor": "korean",
}
"""OCRmyPDF's (Tesseract's) language names -> ours (PaddleOCR's), so that `-l fra` works as
`-l fr` does; PaddleOCR's own codes are accepted as they are."""
ORIENTATION_CONFIDENCE = 30.0
"""What a page the classifier found turned reports, times its score (0 to 1): OCRmyPDF turns a
page when this passes `--rotate-pages-threshold` (14 by default, in Tesseract's unbounded units).
The server calls a page turned only past its own threshold, so a turned page's score is high
(0.93 for the test's sideways page: 27.8 here, where 15 times it fell short)."""


def page_skew(page: dict[str, Any]) -> float:
    """The page's skew (degrees counter-clockwise) as the server reported it; from its lines'
    boxes for a server that does not report it."""
    if "skew" in page:
        return float(page["skew"])
    return estimate_skew([line["box"] for line in page["lines"]])


def paddle_lang(languages: Sequence[str]) -> str:
    """The `lang` sent for OCRmyPDF's `-l`: the first language named, in PaddleOCR's code (the
    model set that reads it reads the whole page; sets read several languages each)."""
    first = languages[0] if languages else "eng"
    return TESSERACT_CODES.get(first, first)


def _bbox(box: Sequence[float], scale: float) -> BoundingBox:
    return BoundingBox(
        left=box[0] * scale, top=box[1] * scale, right=box[2] * scale, bottom=box[3] * scale
    )


def _line_bounds(poly: Sequence[Sequence[float]]) -> list[float]:
    xs = [p[0] for p in poly]
    ys = [p[1] for p in poly]
    return [min(xs), min(ys), max(xs), max(ys)]


MIN_INK_CONTRAST = 64
"""Grey levels between a word box's darkest and lightest pixel below which it is not trimmed."""


def hug_ink(
    gray: np.ndarray | None, box: BoundingBox, quad: np.ndarray | None = None
) -> BoundingBox:
    """`box` narrowed to the columns with ink in it, on the page's greyscale `gray`; with the
    word's line `quad` (4 points, the image's pixels), only the ink inside the line counts.

    Our word boxes come from the recogniser's CTC alignment and reach into the spaces between
    words; OCRmyPDF fits each word's glyphs to its box and puts a space after it, which then
    overlaps the next word, and pdftotext reads the two as one ("thisand": 10% of the test
    pages' words). Tesseract's boxes hug the ink; trimmed to it, ours leave the gap a reader
    takes for a space. On a page scanned askew a word's upright box also holds the ends of the
    words above and below it, whose ink filled the gaps (the issue's 4-degree page: "willusually",
    "conflictwith"): hence the line's quad. Only ever narrower; a box without clear ink stays as
    it is.
    """
    if gray is None:
        return box
    x0, x1 = max(int(box.left), 0), min(int(np.ceil(box.right)), gray.shape[1])
    y0, y1 = max(int(box.top), 0), min(int(np.ceil(box.bottom)), gray.shape[0])
    crop = gray[y0:y1, x0:x1]
    if crop.size == 0:
        return box
    inside = np.ones(crop.shape, dtype=bool)
    if quad is not None:
        mask = np.zeros(crop.shape, dtype=np.uint8)
        cv2.fillPoly(mask, [np.rint(quad - (x0, y0)).astype(np.int32)], (1,))
        inside = mask.astype(bool)
        if not inside.any():
            return box
    darkest, lightest = int(crop[inside].min()), int(crop[inside].max())
    if lightest - darkest < MIN_INK_CONTRAST:
        return box
    columns = np.flatnonzero(((crop < (darkest + lightest) / 2) & inside).any(axis=0))
    return BoundingBox(
        left=max(box.left, float(x0 + columns[0])),
        top=box.top,
        right=min(box.right, float(x0 + columns[-1] + 1)),
        bottom=box.bottom,
    )


def line_baseline(
    line: dict[str, Any], scale: float, skew_deg: float
) -> tuple[BoundingBox, Baseline] | None:
    """The box and baseline OCRmyPDF's renderer sets `line` (native JSON, scaled by `scale`)
    on, as our own PDFs lay it (`serving.outputs.pdf_layer.LINE_LAYOUT`: level through the
    line's middle on a page scanned askew, which text extractors read as one line); None for a
    line set sideways, left to the renderer's own handling.

    The renderer starts a line's baseline at its box's left edge, `intercept` above the box's
    bottom, and makes the font as tall as the box above that point. So the box given is the
    line's band where its baseline starts (its thickness tall), not the box around the whole
    line: a line 2.5 degrees askew over 1,500 pixels is 65 pixels taller than its text, and the
    renderer made its font that tall, so that poppler read neighbouring lines into each other
    and found no gap between the words ("Thewordsusedherecanbeconfusing").
    """
    built = make_line(str(line["text"]), 1.0, line["box"])
    base = baseline(built, skew_deg, (scale, scale), LINE_LAYOUT)
    if abs(base.angle_deg - skew_deg) > MAX_DEG:
        return None
    ux, uy = base.direction
    slope = uy / ux
    left, right = built.box[0] * scale, built.box[2] * scale
    at_left = base.origin[1] + (left - base.origin[0]) * slope
    descent = DESCENT * base.size
    box = BoundingBox(
        left=left, top=at_left + descent - base.size, right=right, bottom=at_left + descent
    )
    return box, Baseline(slope=slope, intercept=-descent)


def _word_boxes(
    line: dict[str, Any], words: list[dict[str, Any]], scale: float, skew_deg: float
) -> list[BoundingBox]:
    """The words' boxes as our own PDFs place them along the line (`serving.outputs.pdf_layer`):
    on an askew page a word's upright box is wider than the word by the slant of the line's
    thickness and overlaps its neighbours' (OCRmyPDF stretches a word to its box: "will" then
    reached into "usually", and pdftotext read "willusually"); each word spans its length along
    the line, short of the next by a gap a reader takes for a space."""
    built = make_line(
        str(line["text"]),
        1.0,
        line["box"],
        [Word(text=w["text"], box=_int_box(w["box"]), score=float(w["score"])) for w in words],
    )
    placed = place_line(built, skew_deg, (scale, scale))
    boxes = [_bbox(w["box"], scale) for w in words]
    if placed is None or placed.angle_deg or len(placed.words) != len(words):
        return boxes  # a line set sideways: as the server boxed it
    x = placed.origin[0]
    return [
        BoundingBox(left=x + p.start, top=b.top, right=x + p.start + p.width, bottom=b.bottom)
        for p, b in zip(placed.words, boxes, strict=True)
    ]


def _int_box(box: Sequence[float]) -> tuple[int, int, int, int]:
    return (int(box[0]), int(box[1]), int(box[2]), int(box[3]))


def _line_element(
    line: dict[str, Any], scale: float, gray: np.ndarray | None, skew_deg: float = 0.0
) -> OcrElement:
    quad = np.asarray(line["box"], dtype=np.float64).reshape(4, 2) * scale
    kept = [word for word in line.get("words", []) if word["text"].strip()]
    words = [
        OcrElement(
            ocr_class=OcrClass.WORD,
            bbox=hug_ink(gray, box, quad),
            text=word["text"],
            confidence=round(100 * float(word["score"]), 2),
        )
        for word, box in zip(kept, _word_boxes(line, kept, scale, skew_deg), strict=True)
    ]
    placed = line_baseline(line, scale, skew_deg)
    return OcrElement(
        ocr_class=OcrClass.LINE,
        bbox=_bbox(_line_bounds(line["box"]), scale) if placed is None else placed[0],
        baseline=None if placed is None else placed[1],
        text=line["text"],
        confidence=round(100 * float(line["score"]), 2),
        children=words,
    )


def page_elements(
    page: dict[str, Any],
    size: tuple[int, int],
    dpi: float,
    page_number: int,
    gray: np.ndarray | None = None,
) -> tuple[OcrElement, str]:
    """The `/v1/ocr` JSON `page` (with `words` and `blocks`) as OCRmyPDF's page tree and its
    plain text (blocks in reading order, a blank line between), in the pixels of the image of
    `size` OCRmyPDF sent (a page the server read scaled down is scaled back up); with the
    image's greyscale `gray`, each word's box narrowed to its ink (`hug_ink`)."""
    width, height = size
    scale = width / page["width"] if page.get("width") else 1.0
    lines = page["lines"]
    skew = page_skew(page)
    blocks = page.get("blocks") or [{"lines": list(range(len(lines)))}]
    paragraphs = []
    texts = []
    for block in blocks:
        members = [_line_element(lines[i], scale, gray, skew) for i in block["lines"]]
        members = [line for line in members if line.children]
        if not members:
            continue
        paragraphs.append(
            OcrElement(
                ocr_class=OcrClass.PARAGRAPH,
                bbox=BoundingBox(
                    left=min(m.bbox.left for m in members if m.bbox),
                    top=min(m.bbox.top for m in members if m.bbox),
                    right=max(m.bbox.right for m in members if m.bbox),
                    bottom=max(m.bbox.bottom for m in members if m.bbox),
                ),
                children=members,
            )
        )
        texts.append("\n".join(m.text for m in members))
    root = OcrElement(
        ocr_class=OcrClass.PAGE,
        bbox=BoundingBox(left=0, top=0, right=width, bottom=height),
        dpi=dpi,
        page_number=page_number,
        children=paragraphs,
    )
    return root, "\n\n".join(texts) + ("\n" if texts else "")


def _image(input_file: Path) -> tuple[bytes, tuple[int, int], float]:
    """The image's bytes as OCRmyPDF wrote it (PNG/TIFF: the server reads either), its size and
    its horizontal DPI."""
    data = input_file.read_bytes()
    with Image.open(io.BytesIO(data)) as img:
        size = img.size
        dpi = img.info.get("dpi", (72.0, 72.0))
    return data, size, float(dpi[0] if isinstance(dpi, tuple) else dpi)


def _gray(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("L"))


class ServingOcrEngine(OcrEngine):
    """PaddleOCR's models as this project serves them."""

    @staticmethod
    def version() -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("ocr-serving")
        except PackageNotFoundError:
            return "0"

    @staticmethod
    def creator_tag(options: OcrOptions) -> str:
        return f"ocr-serving {ServingOcrEngine.version()} (PaddleOCR models)"

    def __str__(self) -> str:
        return f"ocr-serving {self.version()}"

    @staticmethod
    def languages(options: OcrOptions) -> Set[str]:
        # OCRmyPDF asks before any page, while checking its options, where it reports a missing
        # dependency (exit 3, as for a missing Tesseract) but would show any other error raw.
        try:
            served = backend_for(options).languages()
        except OcrServerError as err:
            raise MissingDependencyError(str(err)) from err
        return served | {name for name, code in TESSERACT_CODES.items() if code in served}

    @staticmethod
    def get_orientation(input_file: Path, options: OcrOptions) -> OrientationConfidence:
        data, _, _ = _image(input_file)
        try:
            page = backend_for(options).ocr(
                data, {"orientation": "auto", "lang": paddle_lang(options.languages)}
            )
        except OcrServerError as err:
            if err.status != 422:
                raise
            # The server has no page classifier (422 names it): the page stays as it is.
            logger.warning("--rotate-pages: %s; pages are left as they are", err)
            return OrientationConfidence(angle=0, confidence=0.0)
        found = page.get("orientation")
        if not found or not found["turned"]:
            return OrientationConfidence(angle=0, confidence=0.0)
        # The classifier's class is the angle OCRmyPDF turns the page by (a page turned a
        # quarter counter-clockwise is class 270, and OCRmyPDF's /Rotate 270 sets it upright).
        return OrientationConfidence(
            angle=int(found["angle"]), confidence=ORIENTATION_CONFIDENCE * float(found["score"])
        )

    @staticmethod
    def get_deskew(input_file: Path, options: OcrOptions) -> float:
        # --deskew: one more read of the page, for its lines' slopes (OCRmyPDF then turns the
        # image and sends it to generate_ocr).
        data, _, _ = _image(input_file)
        page = backend_for(options).ocr(
            data, {"orientation": "off", "lang": paddle_lang(options.languages)}
        )
        return -page_skew(page)  # OCRmyPDF turns the image by this: the skew undone

    @staticmethod
    def supports_generate_ocr() -> bool:
        return True

    @staticmethod
    def generate_ocr(
        input_file: Path, options: OcrOptions, page_number: int = 0
    ) -> tuple[OcrElement, str]:
        data, size, dpi = _image(input_file)
        # OCRmyPDF turns pages itself (--rotate-pages): the page is read as it comes.
        params = {
            "words": "true",
            "layout": "true",
            "orientation": "off",
            "lang": paddle_lang(options.languages),
        }
        page = backend_for(options).ocr(data, params)
        return page_elements(page, size, dpi, page_number, _gray(data))

    @staticmethod
    def generate_hocr(
        input_file: Path, output_hocr: Path, output_text: Path, options: OcrOptions
    ) -> None:
        raise NotImplementedError("ocr-serving implements generate_ocr (OCRmyPDF 17)")

    @staticmethod
    def generate_pdf(
        input_file: Path, output_pdf: Path, output_text: Path, options: OcrOptions
    ) -> None:
        raise NotImplementedError(
            "ocr-serving implements generate_ocr: use --pdf-renderer auto or fpdf2"
        )
