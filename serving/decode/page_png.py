"""One page of a document as PNG, rendered exactly as the OCR pipeline sees it (CPU worker)."""

from __future__ import annotations

import cv2

from serving.decode.documents import decode_page
from serving.decode.readers import DecodeLimits, FileKind
from serving.errors import InvalidInput


def page_png(data: bytes, kind: FileKind, index: int, limits: DecodeLimits) -> bytes:
    """Page `index` (0-based) of an image or PDF, as PNG; PDF pages at `pdf_render_scale`, so the
    boxes `/v1/ocr` returns for that page fall on it pixel for pixel.

    Raises:
        InvalidInput: the file does not decode, the page does not exist, or a limit is exceeded.
    """
    page = decode_page(data, kind, index, limits)
    ok, encoded = cv2.imencode(".png", page, [cv2.IMWRITE_PNG_COMPRESSION, 1])
    if not ok:
        raise InvalidInput("The page could not be encoded as PNG")
    return bytes(encoded.tobytes())
