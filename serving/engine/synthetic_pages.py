"""Synthetic text pages with their lines: the precision check's dense pages, and the tests'.

Rendered with the fonts scripts/system-deps.sh installs (DejaVu Sans, WenQuanYi Micro Hei), seeded,
so the same call gives the same pixels. The precision check each CPU runs at start-up reads them
(`serving.engine.check_set`: whole-model bf16 read "Totalamount" on `latin_lines`, bf16 without
AMX "1034value" on `dense_page(0)`: issues 41 and 46), and tests/images.py re-exports them.
"""

from __future__ import annotations

import functools
import random
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageDraw, ImageFont

A4_150DPI_PX = (1240, 1754)
"""(width, height) of an A4 page rendered at 150 dpi."""

WHITE = (255, 255, 255)
BLACK = (0, 0, 0)

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
def font(kind: str, size_px: int) -> ImageFont.FreeTypeFont:
    """The "latin" (DejaVu Sans) or "chinese" (WenQuanYi Micro Hei) font at `size_px`.

    Raises:
        FontNotFoundError: it is not installed.
    """
    return ImageFont.truetype(_font_path(kind), size_px)


def to_bgr(img: Image.Image) -> np.ndarray:
    """A PIL image as a BGR uint8 array (the pipeline's pixels)."""
    rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
    return np.ascontiguousarray(rgb[:, :, ::-1])


def _render_lines(
    lines: tuple[str, ...] | list[str], face: ImageFont.FreeTypeFont, *, margin_px: int = 40
) -> Image.Image:
    line_height = int(face.size * 1.8)
    width = int(max(face.getlength(line) for line in lines)) + 2 * margin_px
    height = line_height * len(lines) + 2 * margin_px
    img = Image.new("RGB", (width, height), WHITE)
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((margin_px, margin_px + i * line_height), line, font=face, fill=BLACK)
    return img


def latin_lines() -> TextImage:
    """Four short Latin lines (words, digits, punctuation) in DejaVuSans at 32 px."""
    img = _render_lines(LATIN_LINES, font("latin", 32))
    return TextImage(to_bgr(img), list(LATIN_LINES))


def chinese_lines() -> TextImage:
    """Four lines of common simplified Chinese mixed with digits, WenQuanYi Micro Hei, 36 px."""
    img = _render_lines(CHINESE_LINES, font("chinese", 36))
    return TextImage(to_bgr(img), list(CHINESE_LINES))


def _dense_text(rng: random.Random, face: ImageFont.FreeTypeFont, max_width_px: float) -> str:
    words = [f"{rng.randint(1, 9999)}" if rng.random() < 0.15 else rng.choice(_WORDS)]
    while True:
        word = f"{rng.randint(1, 9999)}" if rng.random() < 0.15 else rng.choice(_WORDS)
        candidate = " ".join([*words, word])
        if face.getlength(candidate) > max_width_px or len(words) >= 14:
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
    heading, body = font("latin", 30), font("latin", 22)
    rng = random.Random(seed)
    img = Image.new("RGB", (width, height), WHITE)
    draw = ImageDraw.Draw(img)
    lines: list[str] = []
    y = margin_px
    for i in range(n_lines):
        face = heading if i % 8 == 0 else body
        text = _dense_text(rng, face, (width - 2 * margin_px) * (0.5 if i % 8 == 0 else 1.0))
        draw.text((margin_px, y), text, font=face, fill=BLACK)
        lines.append(text)
        y += int(face.size * 1.5) + (10 if i % 8 == 0 else 0)
    if y > height - margin_px // 2:
        raise AssertionError(f"dense_page overflowed the page: y={y}")  # internal invariant
    return TextImage(to_bgr(img), lines)
