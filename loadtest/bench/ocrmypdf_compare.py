"""Searchable PDFs side by side: `ocr-batch --format pdf` against OCRmyPDF on the same scans.

    python -m loadtest.bench.ocrmypdf_compare --pages 12 --out ocrmypdf-out

Real pages (text pages of Debian's manuals, English and Chinese, whose text layer is the truth)
are rendered at `--dpi` and saved as scans: JPEG, and every third page degraded as a poor scan
is (a slight skew, blur, noise, harder JPEG). The scans go into one image-only PDF (img2pdf: the
JPEGs as they are), and each tool makes a searchable PDF of it, timed from its command's start to
its exit (model loading included), and once more on the first page alone, so that the pages
after the first over the time they added give a rate past the start-up:

- ours: `ocr-batch scans.pdf --format pdf` (in process; `--config`, default config.toml);
- OCRmyPDF with its defaults and Tesseract's English (`ocrmypdf -l eng`; `--tesseract-lang
  chi_sim+eng` needs Debian's tesseract-ocr-chi-sim).

Each PDF's text is read back by `pdftotext` (poppler) page by page and scored against the
truth: CER after `loadtest.accuracy.normalize_text`, per page and per kind of page (English,
Chinese, degraded). Also reported: pages/s and the output's size. Writes `compare.json`, the PDFs
and the scans under `--out`, and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from loadtest.accuracy import char_edits
from loadtest.engine_limit import real_page_set
from serving.cpus import available_cpus

CHINESE_PDF_STEM = "maint-guide.zh-cn"
"""Pages of this manual are the Chinese ones (`loadtest.pages.REAL_PDFS`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Scan:
    """One scanned page and its true text."""

    label: str
    kind: str
    """english, chinese or degraded."""
    jpeg: bytes
    truth: str


def degrade(image: np.ndarray, seed: int) -> np.ndarray:
    """A poor scan of `image`: skewed by up to a degree, blurred, with sensor noise."""
    rng = np.random.default_rng(seed)
    height, width = image.shape[:2]
    angle = float(rng.uniform(-1.0, 1.0))
    matrix = cv2.getRotationMatrix2D((width / 2, height / 2), angle, 1.0)
    white = (255, 255, 255)
    skewed = cv2.warpAffine(image, matrix, (width, height), borderValue=white)
    blurred = cv2.GaussianBlur(skewed, (3, 3), 0.9)
    noise = rng.normal(0.0, 14.0, blurred.shape)
    return np.clip(blurred.astype(np.float32) + noise, 0, 255).astype(np.uint8)


def make_scans(pages: int, dpi: float) -> list[Scan]:
    """`pages` real pages as JPEG scans, every third degraded."""
    scans = []
    for index, (label, image, truth) in enumerate(real_page_set(pages, dpi)):
        degraded = index % 3 == 2
        pixels = degrade(image, seed=index) if degraded else image
        ok, jpeg = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 55 if degraded else 90])
        if not ok:
            raise RuntimeError(f"cannot encode {label}")
        kind = "chinese" if label.startswith(CHINESE_PDF_STEM) else "english"
        scans.append(
            Scan(
                label=label, kind="degraded" if degraded else kind, jpeg=jpeg.tobytes(), truth=truth
            )
        )
    return scans


def scans_pdf(scans: list[Scan], dpi: float, path: Path) -> None:
    """One image-only PDF of the scans, each JPEG embedded as it is, at `dpi`."""
    import img2pdf  # type: ignore[import-untyped]  # OCRmyPDF's dependency (the `test` extra)

    layout = img2pdf.get_fixed_dpi_layout_fun((dpi, dpi))
    path.write_bytes(img2pdf.convert([io.BytesIO(s.jpeg) for s in scans], layout_fun=layout))


def pdf_page_texts(pdf: Path, pages: int) -> list[str]:
    """Each page's text as `pdftotext` reads it (poppler's reading order, not `-layout`)."""
    texts = []
    for page in range(1, pages + 1):
        out = subprocess.run(
            ["pdftotext", "-q", "-f", str(page), "-l", str(page), str(pdf), "-"],
            check=True,
            capture_output=True,
        )
        texts.append(out.stdout.decode("utf-8", "replace"))
    return texts


def timed(command: list[str], log: Path) -> float:
    """Run `command` (its output to `log`); its wall seconds.

    Raises:
        RuntimeError: it failed.
    """
    started = time.monotonic()
    with log.open("wb") as sink:
        done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}; see {log}")
    return elapsed


def score(tool: str, pdf: Path, scans: list[Scan], wall_s: float) -> dict[str, Any]:
    """The tool's row: CER of `pdftotext` against the truth, overall and per kind of page."""
    texts = pdf_page_texts(pdf, len(scans))
    kinds: dict[str, list[int]] = {}
    per_page = []
    for scan, text in zip(scans, texts, strict=True):
        edits, chars = char_edits(scan.truth, text)
        totals = kinds.setdefault(scan.kind, [0, 0])
        totals[0] += edits
        totals[1] += chars
        per_page.append({"page": scan.label, "kind": scan.kind, "cer": round(edits / chars, 4)})
    edits = sum(t[0] for t in kinds.values())
    chars = sum(t[1] for t in kinds.values())
    return {
        "tool": tool,
        "cer": round(edits / chars, 4),
        "cer_by_kind": {kind: round(e / n, 4) for kind, (e, n) in sorted(kinds.items())},
        "pages": len(scans),
        "wall_s": round(wall_s, 1),
        "pages_per_s": round(len(scans) / wall_s, 3),
        "output_bytes": pdf.stat().st_size,
        "per_page": per_page,
    }


def run_ours(scans_path: Path, out: Path, config: Path | None) -> tuple[Path, float]:
    """`ocr-batch --format pdf` on `scans_path`; its PDF and wall seconds."""
    batch_out = out / f"ours-{scans_path.stem}"
    shutil.rmtree(batch_out, ignore_errors=True)
    command = [str(Path(sys.executable).with_name("ocr-batch")), str(scans_path)]
    command += ["--out", str(batch_out), "--format", "pdf", "--quiet"]
    if config is not None:
        command += ["--config", str(config)]
    wall_s = timed(command, out / f"ours-{scans_path.stem}.log")
    return batch_out / f"{scans_path.name}.pdf", wall_s


def run_ocrmypdf(scans_path: Path, out: Path, lang: str, jobs: int) -> tuple[Path, float]:
    """OCRmyPDF with its defaults and Tesseract's `lang` on `scans_path`; its PDF and wall
    seconds."""
    target = out / f"ocrmypdf-{scans_path.stem}.pdf"
    executable = Path(sys.executable).with_name("ocrmypdf")
    command = [str(executable), "-l", lang, "--jobs", str(jobs), str(scans_path), str(target)]
    return target, timed(command, out / f"ocrmypdf-{scans_path.stem}.log")


def after_startup(pages: int, wall_s: float, first_page_s: float | None) -> float | None:
    """Pages/s past the start-up: the pages after the first over the time they added to a run
    of the first page alone; None without that run, or when it took as long."""
    if first_page_s is None or pages < 2 or wall_s <= first_page_s:
        return None
    return round((pages - 1) / (wall_s - first_page_s), 3)


def main(argv: list[str] | None = None) -> int:
    """Run both tools on the same scans and print the table; 0 when both made their PDF."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench.ocrmypdf_compare")
    parser.add_argument("--out", type=Path, default=Path("ocrmypdf-out"))
    parser.add_argument("--pages", type=int, default=12, help="pages over the 4 manuals")
    parser.add_argument("--dpi", type=float, default=150.0)
    parser.add_argument(
        "--config",
        type=Path,
        default=Path("config.toml") if Path("config.toml").exists() else None,
        help="ocr-batch's config (default: ./config.toml, the server's)",
    )
    parser.add_argument("--tesseract-lang", default="eng", help="OCRmyPDF's -l (default eng)")
    parser.add_argument("--jobs", type=int, default=available_cpus(), help="OCRmyPDF's --jobs")
    parser.add_argument(
        "--tools", default="ours,ocrmypdf", help="which to run, comma-separated (default both)"
    )
    parser.add_argument(
        "--no-startup-run",
        action="store_true",
        help="skip each tool's run on the first page alone (which measures its start-up)",
    )
    args = parser.parse_args(argv)
    for needed in ("pdftotext", "tesseract"):
        if shutil.which(needed) is None:
            parser.error(f"{needed} is not installed (scripts/system-deps.sh installs it)")
    args.out.mkdir(parents=True, exist_ok=True)
    scans = make_scans(args.pages, args.dpi)
    scans_path = args.out / "scans.pdf"
    scans_pdf(scans, args.dpi, scans_path)
    first_path = args.out / "first-page.pdf"
    scans_pdf(scans[:1], args.dpi, first_path)
    runs = {
        "ocr-batch --format pdf": lambda path: run_ours(path, args.out, args.config),
        f"OCRmyPDF -l {args.tesseract_lang}": lambda path: run_ocrmypdf(
            path, args.out, args.tesseract_lang, args.jobs
        ),
    }
    rows = []
    for tool, name in zip(runs, ("ours", "ocrmypdf"), strict=True):
        if name not in args.tools.split(","):
            continue
        first_s = None if args.no_startup_run else runs[tool](first_path)[1]
        pdf, wall_s = runs[tool](scans_path)
        row = score(tool, pdf, scans, wall_s)
        row["first_page_alone_s"] = None if first_s is None else round(first_s, 1)
        row["pages_per_s_after_startup"] = after_startup(len(scans), wall_s, first_s)
        rows.append(row)
    report = {
        "command": " ".join(["python -m loadtest.bench.ocrmypdf_compare", *(argv or sys.argv[1:])]),
        "cpu_count": os.cpu_count(),
        "dpi": args.dpi,
        "input_bytes": scans_path.stat().st_size,
        "pages": [{"page": s.label, "kind": s.kind} for s in scans],
        "rows": rows,
    }
    (args.out / "compare.json").write_text(json.dumps(report, indent=1) + "\n")
    kinds = sorted({s.kind for s in scans})
    print(f"{len(scans)} pages at {args.dpi:g} dpi, scans.pdf {report['input_bytes']:,} bytes")
    print(
        "| tool | CER | "
        + " | ".join(f"CER {k}" for k in kinds)
        + " | pages/s | pages/s after start-up | one page alone, s | output bytes |"
    )
    print("|---|---|" + "---|" * len(kinds) + "---|---|---|---|")
    for row in rows:
        by_kind = " | ".join(f"{row['cer_by_kind'].get(k, 0.0):.1%}" for k in kinds)
        print(
            f"| {row['tool']} | {row['cer']:.1%} | {by_kind} | {row['pages_per_s']} | "
            f"{row['pages_per_s_after_startup']} | {row['first_page_alone_s']} | "
            f"{row['output_bytes']:,} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
