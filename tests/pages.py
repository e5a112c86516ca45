"""A document's pages read as a request reads them (`serving.service.ocr`): all of them planned
from the headers first, every limit checked there, then each page decoded alone."""

from __future__ import annotations

import numpy as np

from serving.decode.documents import decode_page, page_plans
from serving.decode.readers import DecodeLimits, FileKind


def read_pages(data: bytes, kind: FileKind, limits: DecodeLimits) -> list[np.ndarray]:
    """Every page of `data` as BGR uint8, or the InvalidInput a request would get."""
    plans = page_plans(data, kind, limits)
    return [decode_page(data, kind, index, limits) for index in range(len(plans))]
