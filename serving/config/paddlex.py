"""`[paddlex]`: the PaddleX-compatible `/ocr` endpoint."""

from __future__ import annotations

from dataclasses import dataclass

from serving.config.checks import check


@dataclass(frozen=True, slots=True, kw_only=True)
class PaddlexConfig:
    """Behaviour of the PaddleX-compatible `/ocr` endpoint."""

    visualize: bool = True
    """Default for the request's `visualize` field (PaddleX's default is true)."""
    visualize_max_pixels: int = 1_000_000
    """Pixels of each picture `visualize` answers (`inputImage`, `ocrImage`): scaled down to it."""
    visualize_max_bytes: int = 512 * 1024
    """Bytes of each picture's JPEG (before base64): encoded at lower quality, then scaled down
    further, until it fits."""

    def __post_init__(self) -> None:
        check(self.visualize_max_pixels >= 1024, "paddlex.visualize_max_pixels", "must be >= 1024")
        check(self.visualize_max_bytes >= 4096, "paddlex.visualize_max_bytes", "must be >= 4096")
