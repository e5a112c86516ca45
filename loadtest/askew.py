"""Scans that text layers find hard (issue 48): real pages turned a few degrees either way, blurred,
noised and saved as JPEG, as a page laid crooked on a scanner comes out; and table-like pages,
whose cells a reader takes row by row and a layout analysis may take column by column.

The real pages are Debian's manuals (`serving.convert.pdf_pages`), their text layers the truth;
the tables are drawn here with Debian's fonts (DejaVu Sans, WenQuanYi Micro Hei:
scripts/system-deps.sh), their cells the truth. Seeded: the same arguments give the same pages.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from serving.convert import pdf_pages

ANGLES_DEG: tuple[float, ...] = (2.5, -3.0, 1.0, -5.0, 4.0, -1.5, 5.0, -2.0)
"""The turns of the askew pages, in order (counter-clockwise positive, as PIL and OpenCV turn):
1 to 5 degrees, both ways."""
FONTS = {
    "en": "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "zh": "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
}
CHINESE_STEM = "maint-guide.zh-cn"
_WHITE = (255, 255, 255)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scan:
    """One page as a scanner would give it, and its true text."""

    label: str
    kind: str
    """askew or table."""
    lang: str
    """en or zh."""
    angle_deg: float
    """How far the page is turned counter-clockwise (0 for the tables)."""
    jpeg: bytes
    truth: str


def turn(image: np.ndarray, angle_deg: float) -> np.ndarray:
    """`image` turned `angle_deg` counter-clockwise about its centre, on a white canvas grown to
    hold all of it (no text is cut off, so the page's text stays the truth)."""
    height, width = image.shape[:2]
    matrix = cv2.getRotationMatrix2D((width / 2, height / 2), angle_deg, 1.0)
    cos, sin = abs(matrix[0, 0]), abs(matrix[0, 1])
    out_w, out_h = (
        int(np.ceil(width * cos + height * sin)),
        int(np.ceil(width * sin + height * cos)),
    )
    matrix[0, 2] += (out_w - width) / 2
    matrix[1, 2] += (out_h - height) / 2
    return cv2.warpAffine(image, matrix, (out_w, out_h), flags=cv2.INTER_CUBIC, borderValue=_WHITE)


def degrade(image: np.ndarray, seed: int) -> np.ndarray:
    """A poor scan's blur and sensor noise."""
    rng = np.random.default_rng(seed)
    blurred = cv2.GaussianBlur(image, (3, 3), 0.9)
    noise = rng.normal(0.0, 12.0, blurred.shape)
    return np.clip(blurred.astype(np.float32) + noise, 0, 255).astype(np.uint8)


def jpeg(image: np.ndarray, quality: int) -> bytes:
    """`image` (BGR) as a JPEG."""
    ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return data.tobytes()


def askew_scans(count: int, dpi: float = 150.0, *, quality: int = 70) -> list[Scan]:
    """`count` real text pages (English and Chinese manuals alternately), each turned by the
    next of `ANGLES_DEG`, blurred, noised and saved as JPEG."""
    pdfs = pdf_pages.find_real_pdfs()
    if not pdfs:
        raise RuntimeError("no real PDFs found; run scripts/system-deps.sh")
    english = [p for p in pdfs if not p.stem.startswith(CHINESE_STEM)]
    chinese = [p for p in pdfs if p.stem.startswith(CHINESE_STEM)]
    sources: list[tuple[Path, int]] = []
    per = {p: pdf_pages.select_text_pages(p, count) for p in [*english[-1:], *chinese]}
    order = [*english[-1:], *chinese] if chinese else english[-1:]
    for k in range(count):  # take pages from each manual in turn
        pdf = order[k % len(order)]
        picks = per[pdf]
        sources.append((pdf, picks[(k // len(order)) % len(picks)]))
    scans = []
    for k, (pdf, index) in enumerate(sources):
        (image,) = pdf_pages.render_pdf_pages(pdf, dpi=dpi, first=index, count=1)
        angle = ANGLES_DEG[k % len(ANGLES_DEG)]
        pixels = degrade(turn(image, angle), seed=k)
        lang = "zh" if pdf.stem.startswith(CHINESE_STEM) else "en"
        scans.append(
            Scan(
                label=f"{pdf.stem}-p{index + 1}@{angle:+g}deg",
                kind="askew",
                lang=lang,
                angle_deg=angle,
                jpeg=jpeg(pixels, quality),
                truth=pdf_pages.pdf_page_text(pdf, index),
            )
        )
    return scans


_EN_CELLS = (
    ("Package", "Version", "Section", "Priority", "Size"),
    ("libtasn1-6", "4.19.0", "libs", "optional", "52 kB"),
    ("shared-mime-info", "2.2", "misc", "optional", "720 kB"),
    ("maint-guide", "1.2.53", "doc", "optional", "1.1 MB"),
    ("debhelper", "13.11.4", "devel", "optional", "1.0 MB"),
    ("dpkg-dev", "1.21.22", "utils", "optional", "1.3 MB"),
    ("lintian", "2.116.3", "devel", "optional", "1.6 MB"),
    ("quilt", "0.67", "vcs", "optional", "316 kB"),
    ("pbuilder", "0.231", "devel", "optional", "904 kB"),
    ("devscripts", "2.23.4", "devel", "optional", "2.1 MB"),
    ("git-buildpackage", "0.9.30", "vcs", "optional", "2.0 MB"),
    ("fakeroot", "1.31", "utils", "optional", "212 kB"),
    ("build-essential", "12.9", "devel", "optional", "8 kB"),
)
_ZH_CELLS = (
    ("软件包", "版本", "类别", "说明"),
    ("dpkg-dev", "1.21.22", "工具", "构建软件包的工具"),
    ("debhelper", "13.11.4", "开发", "打包辅助程序"),
    ("lintian", "2.116.3", "开发", "检查软件包的错误"),
    ("quilt", "0.67", "版本控制", "管理补丁的工具"),
    ("pbuilder", "0.231", "开发", "干净环境中构建"),
    ("devscripts", "2.23.4", "开发", "维护者的脚本"),
    ("fakeroot", "1.31", "工具", "模拟超级用户权限"),
    ("git-buildpackage", "0.9.30", "版本控制", "用 Git 维护软件包"),
    ("build-essential", "12.9", "开发", "构建所需的基本软件"),
)


def table_page(lang: str, dpi: float = 150.0) -> tuple[np.ndarray, str]:
    """A page whose body is a table (columns a gutter apart, a row a line), with a title above
    and a paragraph below: its BGR pixels at `dpi`, and its text row by row."""
    scale = dpi / 150.0
    font = ImageFont.truetype(FONTS[lang], round(22 * scale))
    title_font = ImageFont.truetype(FONTS[lang], round(32 * scale))
    cells = _EN_CELLS if lang == "en" else _ZH_CELLS
    width, height = round(1240 * scale), round(1754 * scale)
    page = Image.new("RGB", (width, height), _WHITE)
    draw = ImageDraw.Draw(page)
    margin = round(110 * scale)
    title = (
        "Table 4.2: Packages used in this guide" if lang == "en" else "表 4.2：本指南用到的软件包"
    )
    draw.text((margin, margin), title, font=title_font, fill=(0, 0, 0))
    gutter = round(50 * scale)
    widths = [max(font.getlength(row[c]) for row in cells) for c in range(len(cells[0]))]
    lefts = [margin + sum(widths[:c]) + gutter * c for c in range(len(widths))]
    top = margin + round(90 * scale)
    pitch = round(44 * scale)
    lines = [title]
    for r, row in enumerate(cells):
        y = top + r * pitch
        for c, text in enumerate(row):
            draw.text((lefts[c], y), text, font=font, fill=(0, 0, 0))
        lines.append(" ".join(row))
    note = (
        "Each package above is in Debian's main archive and installs with apt."
        if lang == "en"
        else "上表中的每个软件包都在 Debian 的主仓库中，可以用 apt 安装。"
    )
    draw.text((margin, top + len(cells) * pitch + round(60 * scale)), note, font=font, fill=0)
    lines.append(note)
    rgb = np.asarray(page, dtype=np.uint8)
    return np.ascontiguousarray(rgb[:, :, ::-1]), "\n".join(lines)


def table_scans(dpi: float = 150.0, *, quality: int = 85) -> list[Scan]:
    """The table page in English and in Chinese, upright, saved as JPEG."""
    scans = []
    for lang in ("en", "zh"):
        image, truth = table_page(lang, dpi)
        scans.append(
            Scan(
                label=f"table-{lang}",
                kind="table",
                lang=lang,
                angle_deg=0.0,
                jpeg=jpeg(degrade(image, seed=random.Random(lang).randint(0, 999)), quality),
                truth=truth,
            )
        )
    return scans
