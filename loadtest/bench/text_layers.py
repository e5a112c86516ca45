"""Text layers on askew and table-like scans (issue 48): what pdftotext, PyMuPDF and pdfminer.six
read from our searchable PDFs and from OCRmyPDF's with our plugin, against the truth and against
our own `format=text`.

    ocr-bench text-layers --pages 8 [--url URL] [--servers format=pdf,job,plugin]

The scans (`loadtest.askew`): `--pages` real pages turned 1 to 5 degrees both ways, blurred,
noised, JPEG; and two table-like pages (English, Chinese). Each goes to a server (`--url`, else
one started as `make serve` starts it, `--config`) as

- `format=pdf`: `/v1/ocr?format=pdf` (`&deskew=true` for the `format=pdf deskew` row);
- `job`: one job of every scan, each document's PDF (`/v1/jobs/{id}/documents/{n}?format=pdf`);
- `plugin`: `ocrmypdf --plugin serving.ocrmypdf_plugin --ocr-server URL -l chi_sim` on one
  image-only PDF of the scans (img2pdf: the JPEGs as they are);
- `tesseract`: OCRmyPDF's own engine, `-l eng` (`--servers ...,tesseract`), for scale;
- `layout=...` (`--layouts skew,centre:0`): our PDF made in this process from the server's JSON
  with another way of laying the lines (`serving.outputs.baselines`), to measure the choice.

Per row, the means over the pages of: CER of `format=text` against the truth on the askew pages
(its reading order); word F1 of `format=text` and of `pdftotext` (default mode) against the
truth; CER against our `format=text` of `pdftotext -raw`, PyMuPDF's `get_text()`, and on the
askew pages of `pdftotext` (default) and pdfminer.six, and on the tables of `pdftotext`; and the
share of the askew pages' words that a viewer's selection of them covers
(`loadtest.text_layers.words_on_print`). The PDFs stay under `--out`.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from loadtest.askew import Scan, askew_scans, table_scans
from loadtest.bench.ocrmypdf_tools import OurServer
from loadtest.bench.options import count
from loadtest.bench.results import Results
from loadtest.bench.scenario import Scenario, register
from loadtest.text_layers import EXTRACTORS, extract, mean, page_scores, words_on_print

ROWS = ("format=pdf", "format=pdf deskew", "job", "plugin", "tesseract")
_COLUMNS = (
    ("CER text, askew", "cer_text", "askew"),
    ("F1 text", "f1_text", None),
    ("F1 pdftotext", "f1_pdftotext", None),
    ("CER -raw", "cer_pdftotext-raw", None),
    ("CER PyMuPDF", "cer_pymupdf", None),
    ("CER pdftotext, askew", "cer_pdftotext", "askew"),
    ("CER pdfminer, askew", "cer_pdfminer", "askew"),
    ("CER pdftotext, tables", "cer_pdftotext", "table"),
    ("words on their print, askew", "on_print", "askew"),
)


def _post(url: str, scan: Scan, query: str) -> httpx.Response:
    answer = httpx.post(
        f"{url}/v1/ocr?{query}",
        content=scan.jpeg,
        headers={"content-type": "image/jpeg"},
        timeout=600,
    )
    answer.raise_for_status()
    return answer


def our_texts(url: str, scans: list[Scan]) -> list[str]:
    """Each scan's `format=text`."""
    return [_post(url, scan, "format=text").text for scan in scans]


def our_pages(url: str, scans: list[Scan]) -> list[dict[str, Any]]:
    """Each scan's JSON page, with its lines' words and its blocks."""
    return [_post(url, scan, "words=true&layout=true").json()["pages"][0] for scan in scans]


def layout_pdfs(layout: str, scans: list[Scan], pages: list[dict[str, Any]]) -> list[bytes]:
    """Our `format=pdf` of each scan made in this process from its JSON, its lines laid as
    `layout` says: `skew` (along the page's skew) or `centre:DRIFT` (level through the middle,
    grown by half the rise up to DRIFT of the thickness; `serving.outputs.baselines`)."""
    from serving.outputs import baselines, pdf_layer
    from serving.outputs.document import Document, Source, page_from_json
    from serving.outputs.pdf import render

    kind, _, drift = layout.partition(":")
    saved = pdf_layer.LINE_LAYOUT, baselines.DRIFT_SIZE
    pdf_layer.LINE_LAYOUT = "skew" if kind == "skew" else "centre"
    baselines.DRIFT_SIZE = float(drift or baselines.DRIFT_SIZE)
    try:
        return [
            b"".join(
                render(
                    Document(
                        name=scan.label,
                        pages=(page_from_json(page, 0),),
                        source=Source("image/jpeg", scan.jpeg),
                    )
                )
            )
            for scan, page in zip(scans, pages, strict=True)
        ]
    finally:
        pdf_layer.LINE_LAYOUT, baselines.DRIFT_SIZE = saved


def request_pdfs(url: str, scans: list[Scan], query: str = "") -> list[bytes]:
    """Each scan's `/v1/ocr?format=pdf`."""
    return [_post(url, scan, f"format=pdf{query}").content for scan in scans]


def job_pdfs(url: str, scans: list[Scan], timeout_s: float = 1800) -> list[bytes]:
    """One job of every scan; each document's searchable PDF."""
    files = [("file", (f"{i:02d}.jpg", s.jpeg, "image/jpeg")) for i, s in enumerate(scans)]
    made = httpx.post(f"{url}/v1/jobs", files=files, timeout=600)
    made.raise_for_status()
    job = made.json()["id"]
    deadline = time.monotonic() + timeout_s
    while httpx.get(f"{url}/v1/jobs/{job}", timeout=60).json()["status"] in ("queued", "running"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job} still running after {timeout_s} s")
        time.sleep(2)
    pdfs = []
    for n in range(len(scans)):
        answer = httpx.get(f"{url}/v1/jobs/{job}/documents/{n}?format=pdf", timeout=600)
        answer.raise_for_status()
        pdfs.append(answer.content)
    httpx.delete(f"{url}/v1/jobs/{job}", timeout=60)
    return pdfs


def scans_pdf(scans: list[Scan], dpi: float) -> bytes:
    """One image-only PDF of the scans (img2pdf: each JPEG as it is), at `dpi`."""
    import img2pdf  # type: ignore[import-untyped]  # OCRmyPDF's dependency (the `test` extra)

    layout = img2pdf.get_fixed_dpi_layout_fun((dpi, dpi))
    return bytes(img2pdf.convert([io.BytesIO(s.jpeg) for s in scans], layout_fun=layout))


def ocrmypdf_pages(options: list[str], scans_path: Path, out: Path, jobs: int) -> list[bytes]:
    """`ocrmypdf OPTIONS scans out`, split into one-page PDFs (each page read on its own)."""
    import pikepdf

    command = [sys.executable, "-m", "ocrmypdf", *options, "--jobs", str(jobs), "--output-type"]
    command += ["pdf", str(scans_path), str(out)]
    subprocess.run(command, check=True, capture_output=True)
    pages = []
    with pikepdf.open(out) as whole:
        for page in whole.pages:
            one = pikepdf.new()
            one.pages.append(page)
            data = io.BytesIO()
            one.save(data)
            pages.append(data.getvalue())
    return pages


def score_row(
    name: str,
    pdfs: list[bytes],
    scans: list[Scan],
    texts: list[str],
    pages: list[dict[str, Any]],
) -> dict[str, Any]:
    """The row of one way of making the PDFs: per page scores, and their means."""
    per_page: list[dict[str, Any]] = []
    for scan, pdf, ours, page in zip(scans, pdfs, texts, pages, strict=True):
        read = {tool: "\n".join(extract(pdf, tool)) for tool in EXTRACTORS}
        scores = page_scores(scan.truth, ours, read)
        if "deskew" not in name:  # the words' print is on the page as scanned
            scores["on_print"] = words_on_print(pdf, page)
        per_page.append({"page": scan.label, "kind": scan.kind, **scores})
    row: dict[str, Any] = {"row": name, "per_page": per_page}
    for _, key, kind in _COLUMNS:
        rows = [p for p in per_page if (kind is None or p["kind"] == kind) and key in p]
        row[f"{key}@{kind or 'all'}"] = round(mean(rows, key), 4) if rows else None
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (F1 to 3 places, CER as percentages)."""
    head = ["row", *(label for label, _, _ in _COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["row"]]
        for _, key, kind in _COLUMNS:
            value = row[f"{key}@{kind or 'all'}"]
            if value is None:
                cells.append("–")
            else:
                cells.append(f"{value:.3f}" if key.startswith("f1") else f"{value:.1%}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@register
class TextLayers(Scenario):
    """Text layers on askew and table-like scans, read back by pdftotext, PyMuPDF, pdfminer."""

    name = "text-layers"
    help = "searchable PDFs' text layers on askew and table pages, as PDF text tools read them"
    shared = ("out", "pages", "dpi", "servers")
    servers = ROWS

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument("--url", help="a running server's URL (default: start one)")
        parser.add_argument("--config", type=Path, default=None, help="the started server's config")
        parser.add_argument("--jobs", type=count(1), default=2, help="OCRmyPDF's --jobs")
        parser.add_argument(
            "--layouts",
            default="",
            help="more rows: our PDFs made in this process with other line layouts, "
            "comma-separated: skew, centre:DRIFT (e.g. skew,centre:0,centre:0.5)",
        )

    def run(self, args: argparse.Namespace) -> Results:
        """Make the scans, the PDFs of each row, read them back."""
        chosen = args.servers if args.servers is not None else ["format=pdf", "job", "plugin"]
        report = measure(args, chosen, [x for x in args.layouts.split(",") if x])
        return Results(data=report, markdown=markdown(report["rows"]) + "\n")


def measure(args: argparse.Namespace, chosen: list[str], layouts: list[str]) -> dict[str, Any]:
    """Each row's PDFs of the scans, scored."""
    scans = askew_scans(args.pages, args.dpi) + table_scans(args.dpi)
    scans_path = args.out / "scans.pdf"
    scans_path.write_bytes(scans_pdf(scans, args.dpi))
    server = None if args.url else OurServer(config=args.config, log=args.out / "serve.log")
    rows = []
    try:
        url = args.url or server.url()  # type: ignore[union-attr]
        texts = our_texts(url, scans)
        pages = our_pages(url, scans)
        for name in [*(r for r in ROWS if r in chosen), *(f"layout={x}" for x in layouts)]:
            print(f"{name}...", file=sys.stderr)
            if name.startswith("layout="):
                pdfs = layout_pdfs(name.removeprefix("layout="), scans, pages)
            elif name == "format=pdf":
                pdfs = request_pdfs(url, scans)
            elif name == "format=pdf deskew":
                pdfs = request_pdfs(url, scans, "&deskew=true")
            elif name == "job":
                pdfs = job_pdfs(url, scans)
            else:
                options = ["-l", "eng"]
                if name == "plugin":
                    options = ["--plugin", "serving.ocrmypdf_plugin", "--ocr-server", url]
                    options += ["-l", "chi_sim"]
                pdfs = ocrmypdf_pages(options, scans_path, args.out / f"{name}.pdf", args.jobs)
            for scan, pdf in zip(scans, pdfs, strict=True):
                folder = args.out / name.replace(" ", "-").replace("=", "-")
                folder.mkdir(exist_ok=True)
                (folder / f"{scan.label}.pdf").write_bytes(pdf)
            rows.append(score_row(name, pdfs, scans, texts, pages))
    finally:
        if server is not None:
            server.stop()
    return {
        "pages": [{"page": s.label, "kind": s.kind, "angle_deg": s.angle_deg} for s in scans],
        "rows": rows,
    }
