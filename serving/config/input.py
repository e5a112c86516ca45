"""`[input]`: limits on what a request may contain."""

from __future__ import annotations

from dataclasses import dataclass

from serving.config.checks import check


@dataclass(frozen=True, slots=True, kw_only=True)
class InputConfig:
    """Limits on what a request may contain."""

    max_pdf_pages: int = 10
    """PDFs with more pages are refused with 422 (PaddleX silently drops them)."""
    pdf_render_scale: float = 2.0
    """pypdfium2 render scale; 2.0 = 144 dpi, as PaddleX."""
    max_image_pixels: int = 178_956_970
    """Per image or rendered page, as PaddleX. Checked from the header before any pixel is
    decoded: an image whose header PIL cannot read is refused (422), not handed to OpenCV."""
    max_frames_per_document: int = 500
    """Frames of one multi-frame image (TIFF, GIF, WebP), in a request or a job's file; more get
    422. An animated image's frames decode only in order, so a job's GIF or WebP is decoded once,
    in one pass, when the job is submitted (stored as a multi-page TIFF)."""
    max_page_side_px: int = 4000
    """Pages are decoded with their longer side at most this: a PDF page rendered at a lower
    scale, an image downscaled right after decoding, and the answer says so (`scaled_from`).
    The detector reads at most `pipeline.det.max_side_limit` (4000) a side, and line crops are
    resized to the recogniser's 48 px height, so larger pages cost memory and gain little; pages
    up to this (A4 at 144 dpi is 1191 x 1684) decode as before. 0 = as sent."""
    allow_url: bool = False
    """Accept http(s) URLs in `/ocr`'s `file` field. Off by default."""
    url_allowed_hosts: tuple[str, ...] = ()
    """Hosts URL inputs may name (exact names or literal IPs); empty refuses every URL."""
    url_timeout_s: float = 10.0
    """A URL input not downloaded within this gets 422."""
    url_allowed_ports: tuple[int, ...] = ()
    """Ports a URL may name besides its scheme's own (80 for http, 443 for https); a URL on any
    other port of an allowed host gets 422."""

    def __post_init__(self) -> None:
        check(self.url_timeout_s > 0, "input.url_timeout_s", "must be > 0")
        for port in self.url_allowed_ports:
            check(0 < port < 65536, "input.url_allowed_ports", f"not a port: {port!r}")
        check(self.max_pdf_pages > 0, "input.max_pdf_pages", "must be > 0")
        check(self.pdf_render_scale > 0, "input.pdf_render_scale", "must be > 0")
        check(self.max_image_pixels > 0, "input.max_image_pixels", "must be > 0")
        check(self.max_frames_per_document > 0, "input.max_frames_per_document", "must be > 0")
        check(
            self.max_page_side_px == 0 or self.max_page_side_px >= 32,
            "input.max_page_side_px",
            "must be 0 (as sent) or >= 32",
        )
