"""The precision check's pages: the synthetic dense pages and a few real lines per language.

Each CPU proves a reduced precision (bf16, int8) for its models by reading these at f32 and at
the reduced precision (`serving.engine.precision_check`). The set:

- `synthetic`: `dense_page(0)`, `dense_page(1)` and `latin_lines()` (`serving.convert.
  synthetic_pages`): the pages where bf16 merged words ("Totalamount" on an AMX Xeon, issue 41;
  "1034value" on an AMD EPYC without AMX, issue 46). Checked for sets that read a Latin-script
  language.
- one band of real lines (~600 characters) from the Debian Maintainers' Guide in each language
  it is packaged in (`REAL_LINE_PDFS`), with the PDF's text layer in the band as the truth. A
  set is checked on the languages it serves (`models.langs`) that have a band.

Nothing rendered is committed: `python -m serving.convert` (`make convert`, and the image
build, scripts/image-install.sh) renders the set once into the conversion cache,
`<engine.onnx_dir>/check-set/v<CHECK_SET_VERSION>/` (PNG files and `check-set.json`: each item's
language, source and text), from the fonts and PDFs scripts/system-deps.sh installs. A language
whose PDF is missing is left out and named in the manifest; the check then says it did not
read it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from models.langs import LATIN_LANGS

logger = logging.getLogger(__name__)

CHECK_SET_VERSION = 1
"""Bumped whenever what the set holds changes: the cached verdicts name it."""
MANIFEST = "check-set.json"
SYNTHETIC = "synthetic"
"""The synthetic pages' language label: English words, a Latin script."""
REAL_LINE_PDFS: Mapping[str, Path] = {
    lang: Path(f"/usr/share/doc/maint-guide{suffix}/maint-guide.{name}.pdf")
    for lang, suffix, name in (
        ("en", "", "en"),
        ("ch", "-zh-cn", "zh-cn"),
        ("japan", "-ja", "ja"),
        ("fr", "-fr", "fr"),
        ("de", "-de", "de"),
        ("es", "-es", "es"),
        ("it", "-it", "it"),
    )
}
"""PaddleOCR language code -> the Debian Maintainers' Guide in it (scripts/system-deps.sh)."""
BAND_MIN_CHARS = 600
"""Characters (no whitespace) of the pages' own text in each real band, at least."""
DPI = 150.0
"""The bench's render resolution."""
_POINTS_PER_INCH = 72.0
_PDFIUM_LINE_HYPHEN = "\ufffe"
_INK = 160
"""A pixel darker than this (its darkest channel) is ink."""


@dataclass(frozen=True, slots=True)
class CheckItem:
    """One image of the check set and the text it shows."""

    name: str
    lang: str
    image: np.ndarray
    truth: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckSet:
    """The check set as loaded: its items, which languages it lacks and why, and a digest of
    its manifest (the verdict cache's key names it)."""

    version: int
    digest: str
    items: tuple[CheckItem, ...]
    missing: Mapping[str, str] = field(default_factory=dict)
    """Language -> why it has no lines here."""

    @property
    def languages(self) -> tuple[str, ...]:
        """The languages it has items in, in order."""
        return tuple(dict.fromkeys(item.lang for item in self.items))

    def for_languages(self, langs: Collection[str]) -> CheckSet:
        """The items a model set reading `langs` (PaddleOCR codes) is checked on: the real
        lines in those languages, and the synthetic pages where it reads a Latin script."""
        wanted = set(langs)
        if "en" in wanted or wanted & LATIN_LANGS:
            wanted.add(SYNTHETIC)
        return CheckSet(
            version=self.version,
            digest=self.digest,
            items=tuple(item for item in self.items if item.lang in wanted),
            missing={lang: why for lang, why in self.missing.items() if lang in wanted},
        )


def check_set_dir(onnx_dir: str | Path) -> Path:
    """Where `python -m serving.convert` puts the check set for `engine.onnx_dir`."""
    return Path(onnx_dir) / "check-set" / f"v{CHECK_SET_VERSION}"


def load_check_set(directory: Path) -> CheckSet | None:
    """The check set in `directory`; None where none was built there.

    Raises:
        ValueError: the manifest or an image is damaged.
    """
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return None
    raw = manifest.read_bytes()
    data = json.loads(raw)
    items = []
    for entry in data["items"]:
        path = directory / entry["file"]
        if hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
            raise ValueError(f"{path}: not the image the manifest names")
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if image is None:
            raise ValueError(f"{path}: not an image")
        items.append(CheckItem(entry["name"], entry["lang"], image, entry["truth"]))
    return CheckSet(
        version=int(data["version"]),
        digest=hashlib.sha256(raw).hexdigest(),
        items=tuple(items),
        missing=dict(data.get("missing", {})),
    )


def ensure_check_set(directory: Path, docs_root: Path = Path("/")) -> CheckSet:
    """The check set in `directory`, built where there is none, or rebuilt where it lacks a
    language (or the synthetic pages) whose source is installed now: `make test` converts
    before scripts/system-deps.sh installs the fonts and guides.

    Raises:
        OSError: it has to be built and `directory` cannot be written.
        ValueError: the set there is damaged.
    """
    found = load_check_set(directory)
    if found is not None and not _now_installed(found.missing, docs_root):
        return found
    logger.info("building the precision check set in %s", directory)
    return build_check_set(directory, docs_root)


def _now_installed(missing: Mapping[str, str], docs_root: Path) -> bool:
    """Whether a source the set was built without is there now."""
    from serving.engine.synthetic_pages import FontNotFoundError, font

    for lang in missing:
        if lang == SYNTHETIC:
            try:
                font("latin", 22)
            except FontNotFoundError:
                continue
            return True
        pdf = REAL_LINE_PDFS.get(lang)
        if pdf is not None and (docs_root / pdf.relative_to("/")).is_file():
            return True
    return False


def build_check_set(directory: Path, docs_root: Path = Path("/")) -> CheckSet:
    """Render the check set into `directory` (replacing what is there) and load it: the
    synthetic pages where their fonts are installed, a band of each guide that is (under
    `docs_root`: the image build unpacks the guides' packages into a folder of its own).

    Raises:
        OSError: `directory` cannot be written.
    """
    items: list[CheckItem] = []
    missing: dict[str, str] = {}
    try:
        items += _synthetic_items()
    except RuntimeError as err:  # FontNotFoundError
        missing[SYNTHETIC] = str(err)
    for lang, installed in REAL_LINE_PDFS.items():
        pdf = docs_root / installed.relative_to("/")
        if not pdf.is_file():
            missing[lang] = f"{pdf} is not installed (scripts/system-deps.sh)"
            continue
        band = real_band(pdf)
        if band is None:
            missing[lang] = f"{pdf}: no page with {BAND_MIN_CHARS} characters of text"
            continue
        image, truth, page = band
        items.append(CheckItem(f"{lang}-{pdf.name}-p{page + 1}", lang, image, truth))
    write_check_set(directory, items, missing)
    loaded = load_check_set(directory)
    if loaded is None:  # internal invariant: just written
        raise OSError(f"{directory}: the check set was not written")
    return loaded


def _synthetic_items() -> list[CheckItem]:
    from serving.engine.synthetic_pages import dense_page, latin_lines

    pages = {"dense0": dense_page(0), "dense1": dense_page(1), "latin": latin_lines()}
    return [
        CheckItem(f"{SYNTHETIC}-{name}", SYNTHETIC, page.image, "\n".join(page.lines))
        for name, page in pages.items()
    ]


def write_check_set(
    directory: Path, items: Sequence[CheckItem], missing: Mapping[str, str]
) -> None:
    """Write `items` (PNG files) and the manifest into a folder beside `directory`, then put
    it in place: a reader sees the whole set or none.

    Raises:
        OSError: `directory` cannot be written.
    """
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        entries: list[dict[str, Any]] = []
        for item in items:
            file = f"{item.name}.png"
            ok, png = cv2.imencode(".png", item.image)
            if not ok:
                raise OSError(f"cannot encode {file}")
            (staging / file).write_bytes(png.tobytes())
            entries.append(
                {
                    "name": item.name,
                    "lang": item.lang,
                    "file": file,
                    "sha256": hashlib.sha256(png.tobytes()).hexdigest(),
                    "truth": item.truth,
                }
            )
        manifest = {"version": CHECK_SET_VERSION, "items": entries, "missing": dict(missing)}
        text = json.dumps(manifest, ensure_ascii=False, indent=1) + "\n"
        (staging / MANIFEST).write_text(text, encoding="utf-8")
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def real_band(pdf: Path) -> tuple[np.ndarray, str, int] | None:
    """A band of whole text lines from a text page of `pdf` at `DPI`: (its pixels, the text
    layer inside it, the page index); None where no page has enough text.

    The page: the first from the middle of the document on with 1,200 letters and digits in
    its text layer (past the contents). The band: from its first line below the top 8% (the
    running header) down, line after line, until the text layer between the band's edges holds
    `BAND_MIN_CHARS` characters; the edges lie in the white between lines, so no line is cut.
    """
    import pypdfium2 as pdfium

    scale = DPI / _POINTS_PER_INCH
    doc = pdfium.PdfDocument(str(pdf))
    try:
        for index in range(len(doc) // 2, len(doc)):
            page = doc[index]
            textpage = page.get_textpage()
            try:
                text = str(textpage.get_text_range())
                if sum(ch.isalnum() for ch in text) < 2 * BAND_MIN_CHARS:
                    continue
                image = _render(page, scale)
                width_pt, height_pt = page.get_size()
                lines = _ink_lines(image)
                if len(lines) < 3:
                    continue
                top = max(0, lines[0][0] - 6)
                for k, (_, end) in enumerate(lines[1:], start=1):
                    below = lines[k + 1][0] if k + 1 < len(lines) else end + 12
                    bottom = (end + below) // 2
                    truth = str(
                        textpage.get_text_bounded(
                            0, height_pt - bottom / scale, width_pt, height_pt - top / scale
                        )
                    ).replace(_PDFIUM_LINE_HYPHEN, "-")
                    if sum(not ch.isspace() for ch in truth) >= BAND_MIN_CHARS:
                        return np.ascontiguousarray(image[top:bottom]), truth, index
            finally:
                textpage.close()
    finally:
        doc.close()
    return None


def _render(page: Any, scale: float) -> np.ndarray:
    bitmap = page.render(scale=scale)
    try:
        # pypdfium2 renders BGR(A/X) by default: the order the pipeline reads.
        return np.ascontiguousarray(np.asarray(bitmap.to_numpy())[:, :, :3]).copy()
    finally:
        bitmap.close()


def _ink_lines(image: np.ndarray) -> list[tuple[int, int]]:
    """(first, end) rows of each run of rows with ink, between the top 8% and the bottom 8%
    of the page (the running header and the page number)."""
    ink = (image.min(axis=2) < _INK).any(axis=1)
    height = len(ink)
    runs: list[tuple[int, int]] = []
    y = 0
    while y < height:
        if not ink[y]:
            y += 1
            continue
        start = y
        while y < height and ink[y]:
            y += 1
        runs.append((start, y))
    return [(a, b) for a, b in runs if a > 0.08 * height and b < 0.92 * height]
