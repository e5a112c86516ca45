"""Searchable PDFs side by side: our `format=pdf`, OCRmyPDF with our plugin, with Tesseract and
with the third-party PaddleOCR plugins, on the same scans, in one run.

    ocr-bench ocrmypdf --pages 12            # or: make bench-ocrmypdf

Real pages (text pages of Debian's manuals, English and Chinese, whose text layer is the truth)
are rendered at `--dpi` and saved as scans: JPEG, and every third page degraded as a poor scan
is (a slight skew, blur, noise, harder JPEG); `--askew` more pages are turned 1 to 5 degrees both
ways, blurred, noised and saved as JPEG, as a page laid crooked on a scanner
(`loadtest.askew`, issue 48). The scans go into one image-only PDF (img2pdf: the
JPEGs as they are), and each tool (`loadtest.bench.ocrmypdf_tools`) makes a searchable PDF of it,
timed from its command's start to its exit (model loading included), and once more on the first
page alone, so that the pages after the first over the time they added give a rate past the
start-up. OCRmyPDF runs with `--jobs` = the cores (`--jobs`):

- `ours`: `ocr-batch scans.pdf --format pdf` (in process; `--config`, default config.toml);
- `plugin`: `ocrmypdf --plugin serving.ocrmypdf_plugin --ocr-server URL -l chi_sim` against our
  server, started once by the bench as `make serve` starts it (same `--config`);
- `tesseract`: OCRmyPDF's defaults, `-l` each of `--tesseract-langs` (`eng`, and `chi_sim+eng`
  where Tesseract has `chi_sim`: Debian's tesseract-ocr-chi-sim);
- `ocrmypdf-paddleocr`, `ocrmypdf-rapidocr`, `ocrmypdf-paddleocr-plus`: the PyPI plugins at
  their pinned versions, each in its own venv under `--plugin-venvs` (made on first use),
  `--plugin MODULE -l chi_sim` as their READMEs say.

`-l chi_sim` (`--paddle-lang`) picks PaddleOCR's `ch` models for every PaddleOCR-based tool:
they read the English pages too (our `ocr-batch` reads with them by default). Each PDF's text is
read back by `pdftotext` (poppler) page by page and scored against the truth: CER after
`loadtest.accuracy.normalize_text`, per language (en, zh) and per kind of page (English,
Chinese, degraded, askew). Pages/s is reported for the run and for its correct pages alone (CER
at most `--correct-cer`): a fast run that writes garbage counts only what it read; with the
1-minute load average after each tool, as other work on the machine moves the rates. A tool that
cannot be installed or run keeps its row with the reason (its log's error line), and the run
exits 1. The PDFs, logs and the scans stay under `--out`.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import cv2

from loadtest.accuracy import char_edits
from loadtest.askew import askew_scans
from loadtest.bench.common import CHINESE_PDF_STEM, degrade
from loadtest.bench.ocrmypdf_tools import (
    THIRD_PARTY_PLUGINS,
    OurServer,
    ThirdPartyPlugin,
    ToolFailed,
    plugin_venv,
    run_ocrmypdf,
    run_ours,
)
from loadtest.bench.options import count
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.engine_limit import real_page_set
from serving.cpus import available_cpus

__all__ = ["OcrmypdfCompare", "Scan", "after_startup", "degrade", "make_scans", "score"]

TOOLS = ("ours", "plugin", "tesseract", *(t.package for t in THIRD_PARTY_PLUGINS))
"""What `--servers` may name: each way to a searchable PDF."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Scan:
    """One scanned page and its true text."""

    label: str
    kind: str
    """english, chinese or degraded."""
    lang: str
    """en or zh: the manual's language."""
    jpeg: bytes
    truth: str


def make_scans(pages: int, dpi: float, askew: int = 0) -> list[Scan]:
    """`pages` real pages as JPEG scans, every third degraded; then `askew` pages turned 1 to
    5 degrees (`loadtest.askew`)."""
    scans = []
    for index, (label, image, truth) in enumerate(real_page_set(pages, dpi)):
        degraded = index % 3 == 2
        pixels = degrade(image, seed=index) if degraded else image
        ok, jpeg = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 55 if degraded else 90])
        if not ok:
            raise RuntimeError(f"cannot encode {label}")
        chinese = label.startswith(CHINESE_PDF_STEM)
        kind = "degraded" if degraded else "chinese" if chinese else "english"
        lang = "zh" if chinese else "en"
        scans.append(Scan(label=label, kind=kind, lang=lang, jpeg=jpeg.tobytes(), truth=truth))
    for turned in askew_scans(askew, dpi) if askew else []:
        scans.append(
            Scan(
                label=turned.label,
                kind="askew",
                lang=turned.lang,
                jpeg=turned.jpeg,
                truth=turned.truth,
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


def _rate(edits: int, chars: int) -> float:
    return round(edits / chars, 4) if chars else 0.0


def score(
    tool: str, pdf: Path, scans: list[Scan], wall_s: float, correct_cer: float = 0.1
) -> dict[str, Any]:
    """The tool's row: CER of `pdftotext` against the truth, overall, per language and per kind
    of page; pages/s of the run and of its correct pages (CER at most `correct_cer`) alone."""
    texts = pdf_page_texts(pdf, len(scans))
    kinds: dict[str, list[int]] = {}
    langs: dict[str, list[int]] = {}
    per_page = []
    correct = 0
    for scan, text in zip(scans, texts, strict=True):
        edits, chars = char_edits(scan.truth, text)
        for groups, key in ((kinds, scan.kind), (langs, scan.lang)):
            totals = groups.setdefault(key, [0, 0])
            totals[0] += edits
            totals[1] += chars
        page_cer = _rate(edits, chars)
        correct += page_cer <= correct_cer
        per_page.append({"page": scan.label, "kind": scan.kind, "lang": scan.lang, "cer": page_cer})
    edits = sum(t[0] for t in kinds.values())
    chars = sum(t[1] for t in kinds.values())
    return {
        "tool": tool,
        "cer": _rate(edits, chars),
        "cer_by_lang": {lang: _rate(e, n) for lang, (e, n) in sorted(langs.items())},
        "cer_by_kind": {kind: _rate(e, n) for kind, (e, n) in sorted(kinds.items())},
        "pages": len(scans),
        "correct_pages": correct,
        "wall_s": round(wall_s, 1),
        "pages_per_s": round(len(scans) / wall_s, 3),
        "correct_pages_per_s": round(correct / wall_s, 3),
        "output_bytes": pdf.stat().st_size,
        "per_page": per_page,
    }


def after_startup(pages: int, wall_s: float, first_page_s: float | None) -> float | None:
    """Pages/s past the start-up: the pages after the first over the time they added to a run
    of the first page alone; None without that run, or when it took as long."""
    if first_page_s is None or pages < 2 or wall_s <= first_page_s:
        return None
    return round((pages - 1) / (wall_s - first_page_s), 3)


def missing_tesseract_langs(spec: str, installed: set[str]) -> list[str]:
    """The languages of an OCRmyPDF `-l` spec (`chi_sim+eng`) that Tesseract does not have."""
    return [lang for lang in spec.split("+") if lang not in installed]


def tesseract_langs() -> set[str]:
    """What `tesseract --list-langs` lists (it honours TESSDATA_PREFIX)."""
    done = subprocess.run(["tesseract", "--list-langs"], capture_output=True, text=True)
    return {line.strip() for line in done.stdout.splitlines()[1:] if line.strip()}


Runner = Callable[[Path], tuple[Path, float]]


def tool_runs(args: argparse.Namespace, server: OurServer) -> list[tuple[str, str, Runner]]:
    """(name for --servers, label, runner) of each tool, in the table's order."""
    out: Path = args.out
    ocrmypdf_python = Path(sys.executable)
    runs: list[tuple[str, str, Runner]] = [
        ("ours", "`ocr-batch --format pdf`", lambda path: run_ours(path, out, args.config)),
    ]

    def plugin(path: Path) -> tuple[Path, float]:
        options = ["--plugin", "serving.ocrmypdf_plugin", "--ocr-server", server.url()]
        options += ["-l", args.paddle_lang]
        return run_ocrmypdf("plugin", ocrmypdf_python, options, path, out, args.jobs)

    runs.append(("plugin", f"OCRmyPDF + our plugin `-l {args.paddle_lang}`", plugin))
    installed = tesseract_langs()
    for spec in args.tesseract_langs:

        def tesseract(path: Path, spec: str = spec) -> tuple[Path, float]:
            missing = missing_tesseract_langs(spec, installed)
            if missing:
                raise ToolFailed("tesseract", f"Tesseract has no {'+'.join(missing)} traineddata")
            name = f"tesseract-{spec.replace('+', '-')}"
            return run_ocrmypdf(name, ocrmypdf_python, ["-l", spec], path, out, args.jobs)

        runs.append(("tesseract", f"OCRmyPDF + Tesseract `-l {spec}`", tesseract))
    for third in THIRD_PARTY_PLUGINS:

        def third_party(path: Path, third: ThirdPartyPlugin = third) -> tuple[Path, float]:
            log = out / f"{third.package}-install.log"
            python = plugin_venv(args.plugin_venvs, third, log)
            options = ["--plugin", third.module, "-l", args.paddle_lang]
            return run_ocrmypdf(third.package, python, options, path, out, args.jobs)

        label = f"OCRmyPDF + {third.package} {third.version} `-l {args.paddle_lang}`"
        runs.append((third.package, label, third_party))
    return runs


def _cell(value: float | None) -> str:
    return "" if value is None else str(value)


def markdown_table(rows: list[dict[str, Any]], langs: list[str], kinds: list[str]) -> str:
    """The rows as a Markdown table; a failed tool's row says why."""
    head = ["tool", "CER", *(f"CER {x}" for x in [*langs, *kinds])]
    head += ["pages/s", "correct pages/s", "pages/s past start-up", "one page alone, s", "bytes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if "error" in row:
            cells = [row["tool"], f"failed: {row['error']}", *[""] * (len(head) - 2)]
        else:
            by = [row["cer_by_lang"].get(x) for x in langs]
            by += [row["cer_by_kind"].get(x) for x in kinds]
            cells = [row["tool"], f"{row['cer']:.1%}"]
            cells += ["" if cer is None else f"{cer:.1%}" for cer in by]
            cells += [
                str(row["pages_per_s"]),
                f"{row['correct_pages_per_s']} ({row['correct_pages']}/{row['pages']})",
                _cell(row.get("pages_per_s_after_startup")),
                _cell(row.get("first_page_alone_s")),
                f"{row['output_bytes']:,}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@register
class OcrmypdfCompare(Scenario):
    """Searchable PDFs: ours, OCRmyPDF with our plugin, with Tesseract, with the PyPI plugins."""

    name = "ocrmypdf"
    help = "make bench-ocrmypdf: searchable PDFs by ours, OCRmyPDF with our plugin, Tesseract, ..."
    shared = ("out", "pages", "dpi", "servers")
    defaults: ClassVar[dict[str, Any]] = {"pages": 12}
    servers = TOOLS

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument(
            "--config",
            type=Path,
            default=Path("config.toml") if Path("config.toml").exists() else None,
            help="ocr-batch's and the server's config (default: ./config.toml, as make serve)",
        )
        parser.add_argument(
            "--askew", type=int, default=4, help="more pages, turned 1 to 5 degrees (default 4)"
        )
        parser.add_argument(
            "--tesseract-langs",
            type=lambda s: [x for x in s.split(",") if x],
            default=["eng", "chi_sim+eng"],
            help="OCRmyPDF's -l for each Tesseract run, comma-separated (default eng,chi_sim+eng)",
        )
        parser.add_argument(
            "--paddle-lang", default="chi_sim", help="OCRmyPDF's -l for the PaddleOCR plugins"
        )
        parser.add_argument(
            "--jobs", type=count(1), default=available_cpus(), help="OCRmyPDF's --jobs"
        )
        parser.add_argument(
            "--plugin-venvs",
            type=Path,
            default=Path("var/ocrmypdf-plugins"),
            help="where each third-party plugin's venv is made (default var/ocrmypdf-plugins)",
        )
        parser.add_argument(
            "--correct-cer",
            type=float,
            default=0.1,
            help="a page counts as correct at this CER or under (default 0.1)",
        )
        parser.add_argument(
            "--no-startup-run",
            action="store_true",
            help="skip each tool's run on the first page alone (which measures its start-up)",
        )

    def run(self, args: argparse.Namespace) -> Results:
        """Every tool on the same scans; fails where a tool could not make its PDF."""
        for needed in ("pdftotext", "tesseract"):
            if shutil.which(needed) is None:
                raise SystemExit(f"{needed} is not installed (scripts/system-deps.sh installs it)")
        report = measure(args)
        langs = sorted({p["lang"] for p in report["pages"]})
        kinds = [k for k in ("degraded", "askew") if any(p["kind"] == k for p in report["pages"])]
        table = markdown_table(report["rows"], langs, kinds)
        intro = (
            f"{len(report['pages'])} pages at {args.dpi:g} dpi, scans.pdf "
            f"{report['input_bytes']:,} bytes"
        )
        if report["server_ready_s"] is not None:  # started for the plugin's row
            intro += f"; our server ready in {report['server_ready_s']} s"
        ran = {r["tool"]: r["correct_pages_per_s"] for r in report["rows"] if "error" not in r}
        return Results(
            data=report,
            markdown=f"{intro}\n\n{table}\n",
            plots={"correct_pages_s": bars("Correct pages/s", "pages/s", ran)} if ran else {},
            failed=any("error" in row for row in report["rows"]),
        )


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Each chosen tool on the scans, and once on the first page alone."""
    scans = make_scans(args.pages, args.dpi, args.askew)
    scans_path = args.out / "scans.pdf"
    scans_pdf(scans, args.dpi, scans_path)
    first_path = args.out / "first-page.pdf"
    scans_pdf(scans[:1], args.dpi, first_path)
    server = OurServer(config=args.config, log=args.out / "ocr-serve.log")
    rows: list[dict[str, Any]] = []
    try:
        for name, label, runner in tool_runs(args, server):
            if name not in args.servers:
                continue
            print(f"running {label}...", file=sys.stderr)
            try:
                first_s = None if args.no_startup_run else runner(first_path)[1]
                pdf, wall_s = runner(scans_path)
            except ToolFailed as failed:
                rows.append({"tool": label, "error": failed.reason})
                continue
            row = score(label, pdf, scans, wall_s, args.correct_cer)
            row["first_page_alone_s"] = None if first_s is None else round(first_s, 1)
            row["pages_per_s_after_startup"] = after_startup(len(scans), wall_s, first_s)
            row["load_1m_after"] = round(os.getloadavg()[0], 1)  # other work on the machine
            rows.append(row)
    finally:
        server.stop()
    return {
        "jobs": args.jobs,
        "correct_cer": args.correct_cer,
        "server_ready_s": None if server.ready_s is None else round(server.ready_s, 1),
        "input_bytes": scans_path.stat().st_size,
        "pages": [{"page": s.label, "kind": s.kind, "lang": s.lang} for s in scans],
        "rows": rows,
    }
