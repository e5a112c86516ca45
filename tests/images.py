"""Deterministic test images (BGR uint8) with their ground-truth text, and PNG/JPEG/PDF encoders."""

from __future__ import annotations

import functools
import io
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageDraw, ImageFont

__all__ = [
    "A4_150DPI_PX",
    "FontNotFoundError",
    "TextImage",
    "chinese_lines",
    "dense_page",
    "empty_page",
    "encode_jpeg",
    "encode_png",
    "latin_lines",
    "make_pdf",
    "rotated_line",
]

A4_150DPI_PX = (1240, 1754)
"""(width, height) of an A4 page rendered at 150 dpi."""

_WHITE = (255, 255, 255)
_BLACK = (0, 0, 0)
_FIXED_PDF_DATE = time.gmtime(1_704_067_200)  # 2024-01-01T00:00:00Z; PIL wants a struct_time

_FONT_CANDIDATES: dict[str, tuple[tuple[str, ...], str]] = {
    # kind: (known paths, fontconfig family)
    "latin": (
        (
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
        ),
        "DejaVu Sans",
    ),
    "chinese": (
        (
            "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
            "/usr/share/fonts/wenquanyi/wqy-microhei/wqy-microhei.ttc",
        ),
        "WenQuanYi Micro Hei",
    ),
}
_FONT_PACKAGES = {"latin": "fonts-dejavu-core", "chinese": "fonts-wqy-microhei"}

LATIN_LINES = (
    "Invoice 2024-0137",
    "Total amount: 482.50 EUR",
    "The quick brown fox jumps over the lazy dog",
    "Delivery to 47 Baker Street, London",
)
CHINESE_LINES = (
    "今天天气很好",
    "我们在北京工作了3年",
    "价格为128元",
    "2024年5月18日上午9点开会",
)
ROTATED_TEXT = "Rotated line 42 reads fine"

_WORD_TEXT = """
server request batch model page image detection recognition queue worker latency
throughput document invoice receipt report table column number total amount date customer
account payment order shipping address quality accuracy result value memory device process
thread config version release network storage
"""
_WORDS = tuple(_WORD_TEXT.split())


class FontNotFoundError(RuntimeError):
    """A font the renderers need is not installed."""


class TextImage(NamedTuple):
    """A rendered BGR uint8 image and the text lines drawn on it, top to bottom."""

    image: np.ndarray
    lines: list[str]


@functools.cache
def _font_path(kind: str) -> str:
    known, family = _FONT_CANDIDATES[kind]
    for path in known:
        if Path(path).is_file():
            return path
    fc_match = shutil.which("fc-match")
    if fc_match is not None:
        # fc-match always answers with some font, so check the family it fell back to.
        out = subprocess.run(
            [fc_match, "-f", "%{family}\n%{file}", family],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.splitlines()
        if len(out) == 2 and family in out[0].split(",") and Path(out[1]).is_file():
            return out[1]
    raise FontNotFoundError(
        f"font {family!r} not found (tried {', '.join(known)} and fc-match); install the Debian "
        f"package {_FONT_PACKAGES[kind]} with scripts/system-deps.sh"
    )


@functools.cache
def _font(kind: str, size_px: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(_font_path(kind), size_px)


def _to_bgr(img: Image.Image) -> np.ndarray:
    rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
    return np.ascontiguousarray(rgb[:, :, ::-1])


def _render_lines(
    lines: tuple[str, ...] | list[str], font: ImageFont.FreeTypeFont, *, margin_px: int = 40
) -> Image.Image:
    line_height = int(font.size * 1.8)
    width = int(max(font.getlength(line) for line in lines)) + 2 * margin_px
    height = line_height * len(lines) + 2 * margin_px
    img = Image.new("RGB", (width, height), _WHITE)
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((margin_px, margin_px + i * line_height), line, font=font, fill=_BLACK)
    return img


def latin_lines() -> TextImage:
    """Four short Latin lines (words, digits, punctuation) in DejaVuSans at 32 px."""
    img = _render_lines(LATIN_LINES, _font("latin", 32))
    return TextImage(_to_bgr(img), list(LATIN_LINES))


def chinese_lines() -> TextImage:
    """Four lines of common simplified Chinese mixed with digits, WenQuanYi Micro Hei, 36 px."""
    img = _render_lines(CHINESE_LINES, _font("chinese", 36))
    return TextImage(_to_bgr(img), list(CHINESE_LINES))


def rotated_line(angle_deg: float = 20.0) -> TextImage:
    """One Latin line rotated counter-clockwise by ``angle_deg`` on a larger white canvas."""
    font = _font("latin", 32)
    line = Image.new("RGB", (int(font.getlength(ROTATED_TEXT)) + 40, 70), _WHITE)
    ImageDraw.Draw(line).text((20, 12), ROTATED_TEXT, font=font, fill=_BLACK)
    rotated = line.rotate(
        angle_deg, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=_WHITE
    )
    canvas = Image.new("RGB", (rotated.width + 120, rotated.height + 120), _WHITE)
    canvas.paste(rotated, (60, 60))
    return TextImage(_to_bgr(canvas), [ROTATED_TEXT])


def _dense_text(rng: random.Random, font: ImageFont.FreeTypeFont, max_width_px: float) -> str:
    words = [f"{rng.randint(1, 9999)}" if rng.random() < 0.15 else rng.choice(_WORDS)]
    while True:
        word = f"{rng.randint(1, 9999)}" if rng.random() < 0.15 else rng.choice(_WORDS)
        candidate = " ".join([*words, word])
        if font.getlength(candidate) > max_width_px or len(words) >= 14:
            return " ".join(words).capitalize()
        words.append(word)


def dense_page(seed: int = 0, *, n_lines: int = 40) -> TextImage:
    """An A4 page at 150 dpi (1240x1754) with ``n_lines`` lines of text in two font sizes.

    Every eighth line is a 30 px heading; the rest are 22 px body lines of pseudo-random words and
    numbers (seeded, so the same ``seed`` gives the same page).
    """
    if not 1 <= n_lines <= 50:
        raise ValueError(f"n_lines must be in 1..50 to fit the page, got {n_lines}")
    width, height = A4_150DPI_PX
    margin_px = 90
    heading, body = _font("latin", 30), _font("latin", 22)
    rng = random.Random(seed)
    img = Image.new("RGB", (width, height), _WHITE)
    draw = ImageDraw.Draw(img)
    lines: list[str] = []
    y = margin_px
    for i in range(n_lines):
        font = heading if i % 8 == 0 else body
        text = _dense_text(rng, font, (width - 2 * margin_px) * (0.5 if i % 8 == 0 else 1.0))
        draw.text((margin_px, y), text, font=font, fill=_BLACK)
        lines.append(text)
        y += int(font.size * 1.5) + (10 if i % 8 == 0 else 0)
    if y > height - margin_px // 2:
        raise AssertionError(f"dense_page overflowed the page: y={y}")  # internal invariant
    return TextImage(_to_bgr(img), lines)


def empty_page(width_px: int = A4_150DPI_PX[0], height_px: int = A4_150DPI_PX[1]) -> np.ndarray:
    """A blank white BGR page."""
    return np.full((height_px, width_px, 3), 255, dtype=np.uint8)


def _to_pil(img: np.ndarray) -> Image.Image:
    if img.dtype != np.uint8 or img.ndim not in (2, 3):
        raise ValueError(f"expected a uint8 HxW or HxWx3 image, got {img.dtype} {img.shape}")
    if img.ndim == 2:
        return Image.fromarray(img)
    if img.shape[2] != 3:
        raise ValueError(f"expected 3 BGR channels, got shape {img.shape}")
    return Image.fromarray(np.ascontiguousarray(img[:, :, ::-1]))


def encode_png(img: np.ndarray) -> bytes:
    """Encode a BGR (or grayscale) uint8 image as PNG bytes."""
    buf = io.BytesIO()
    _to_pil(img).save(buf, format="PNG")
    return buf.getvalue()


def encode_jpeg(img: np.ndarray, *, quality: int = 90) -> bytes:
    """Encode a BGR (or grayscale) uint8 image as baseline JPEG bytes."""
    buf = io.BytesIO()
    _to_pil(img).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def make_pdf(images: list[np.ndarray], *, dpi: float = 150.0) -> bytes:
    """Build a multi-page image-only PDF (no text layer), one page per image at ``dpi``.

    The dates in the PDF metadata are fixed, so the same images give the same bytes.
    """
    if not images:
        raise ValueError("make_pdf needs at least one image")
    pages = [_to_pil(img) for img in images]
    buf = io.BytesIO()
    pages[0].save(
        buf,
        format="PDF",
        save_all=True,
        append_images=pages[1:],
        resolution=dpi,
        creationDate=_FIXED_PDF_DATE,
        modDate=_FIXED_PDF_DATE,
    )
    return buf.getvalue()
