"""The loops every `ocr-bench` scenario shares (as Ray Serve's `benchmarks/common.py`): the page
sets, a server's answers to lone requests and its closed-loop levels counted in correct pages,
the in-process engine limit, and the small probes (a package's version, a server's precisions).

A page is correct only when its answer carries the text the same server gives that page alone
(`LevelResult.correct_pages_s`): a server that answers fast under load with other text, or fails
some requests, is counted for the pages a client could use.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import httpx
import numpy as np
import psutil

from loadtest.accuracy import WordCounts, char_edits, merged_words, word_counts
from loadtest.client import Api, prepare_request, response_texts
from loadtest.documents import Document
from loadtest.engine_limit import real_page_set
from loadtest.result import LevelResult
from loadtest.run import run_level
from loadtest.servers import ServerProcess
from serving.convert import pdf_pages

__all__ = [
    "KINDS",
    "LANGUAGE_PDFS",
    "Page",
    "ServerRun",
    "degrade",
    "engine_limit",
    "kind_pages",
    "level_dict",
    "measure_server",
    "package_version",
    "page_language",
    "read_all",
    "real_pages",
    "served_models",
    "text_scores",
    "tree_cpu_s",
    "worker_precisions",
    "write_pages",
]

CHINESE_PDF_STEM = "maint-guide.zh-cn"
"""Pages of this manual are the Chinese ones (`serving.convert.pdf_pages.REAL_PDFS`)."""


def page_language(label: str) -> str:
    """A bench page's language from its label: "zh" for the Chinese manual's pages, else "en"."""
    return "zh" if CHINESE_PDF_STEM in label else "en"


@dataclass(frozen=True, slots=True)
class Page:
    """One bench page: its pixels, the text its PDF's text layer holds, and its group."""

    label: str
    image: np.ndarray
    truth: str
    kind: str
    """What it is counted with: a language ("en", "zh", "fr", ...) or "degraded"."""
    jpeg_quality: int | None = None
    """Sent as a JPEG of this quality (a scan); None: as a lossless PNG."""

    @property
    def file_name(self) -> str:
        """The file it is written to and sent as."""
        return f"{self.label}.{'png' if self.jpeg_quality is None else 'jpg'}"


def real_pages(n: int, dpi: float = 150.0) -> list[Page]:
    """`n` text pages spread over the English and Chinese manuals (`real_page_set`), each of
    its language's kind."""
    return [
        Page(label, image, truth, page_language(label))
        for label, image, truth in real_page_set(n, dpi)
    ]


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


DEGRADED_JPEG_QUALITY = 55
"""A poor scan's JPEG quality (as the OCRmyPDF comparison's scans)."""

LANGUAGE_PDFS: dict[str, Path] = {
    lang: Path(f"/usr/share/doc/maint-guide-{debian}/maint-guide.{debian}.pdf")
    for lang, debian in (("fr", "fr"), ("de", "de"), ("es", "es"), ("it", "it"), ("japan", "ja"))
}
"""PaddleOCR language code -> Debian's maint-guide in that language (packages maint-guide-fr,
-de, -es, -it, -ja; scripts/system-deps.sh): real documents, their text layers the truth."""

KINDS = ("en", "zh", "degraded", *LANGUAGE_PDFS)
"""The kinds of page `kind_pages` makes: English and Chinese manuals, poor scans of them, and
Debian's maint-guide in other languages (`LANGUAGE_PDFS`)."""


def _pdf_pages(pdf: Path, count: int, dpi: float, kind: str, skip: int = 0) -> list[Page]:
    """`count` text pages of `pdf` spread over it (the `skip` first of such a spread left out,
    so that another kind's pick of the same PDF is not repeated)."""
    picked = pdf_pages.text_pages(pdf, count + skip, dpi=dpi)[skip:]
    return [Page(f"{kind}-{p.label}", p.image, p.text, kind) for p in picked]


def kind_pages(n: int, kinds: Sequence[str], dpi: float = 150.0) -> list[Page]:
    """`n` pages spread evenly over `kinds` (of `KINDS`), each kind's spread over its PDFs.

    Raises:
        ValueError: an unknown kind, or a kind whose PDFs are not installed
            (scripts/system-deps.sh installs them).
    """
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise ValueError(f"unknown page kinds {unknown}: of {', '.join(KINDS)}")
    real = pdf_pages.find_real_pdfs()
    pages: list[Page] = []
    for kind, count in zip(kinds, pdf_pages.spread(n, len(kinds)), strict=True):
        if kind in ("en", "zh", "degraded"):
            pdfs = [p for p in real if kind == "degraded" or page_language(p.stem) == kind]
        else:
            pdfs = [LANGUAGE_PDFS[kind]]
        pdfs = [p for p in pdfs if p.is_file()]
        if not pdfs:
            raise ValueError(f"no PDF for the {kind!r} pages; run scripts/system-deps.sh")
        for pdf, per_pdf in zip(pdfs, pdf_pages.spread(count, len(pdfs)), strict=True):
            if kind != "degraded":
                pages += _pdf_pages(pdf, per_pdf, dpi, kind)
                continue
            clean = _pdf_pages(pdf, per_pdf, dpi, kind, skip=per_pdf)
            pages += [
                Page(p.label, degrade(p.image, seed=i), p.truth, kind, DEGRADED_JPEG_QUALITY)
                for i, p in enumerate(clean, start=len(pages))
            ]
    return pages


def write_pages(pages: Sequence[Page], folder: Path) -> list[Path]:
    """Each page as the file it is sent as (`Page.file_name`): the server decodes the very
    pixels an in-process engine reads from the same file."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for page in pages:
        path = folder / page.file_name
        params = [] if page.jpeg_quality is None else [cv2.IMWRITE_JPEG_QUALITY, page.jpeg_quality]
        if not cv2.imwrite(str(path), page.image, params):
            raise RuntimeError(f"cannot write {path}")
        paths.append(path)
    return paths


def text_scores(
    pages: Sequence[Page], texts: Mapping[str, Sequence[str]], *, by: str = "kind"
) -> dict[str, dict[str, float]]:
    """CER, merged words and word F1 of `texts` (file name -> lines), per kind of page and
    over all ("all"); CER and F1 summed over the characters and words of the pages."""
    groups: dict[str, list[Page]] = {"all": list(pages)}
    for page in pages:
        groups.setdefault(getattr(page, by), []).append(page)
    scores = {}
    for group, members in groups.items():
        edits = chars = merged = 0
        words = WordCounts(0, 0, 0)
        for page in members:
            hypothesis = "\n".join(texts.get(page.file_name, []))
            e, n = char_edits(page.truth, hypothesis)
            edits, chars = edits + e, chars + n
            merged += merged_words(page.truth, hypothesis)
            words = words + word_counts(page.truth, hypothesis)
        scores[group] = {
            "pages": len(members),
            "cer": round(edits / chars, 5) if chars else 0.0,
            "merged_words": merged,
            "word_f1": round(words.f1, 5),
        }
    return scores


async def _read_all(
    url: str,
    api: Api,
    documents: Sequence[Document],
    concurrency: int,
    query: Mapping[str, str] | None,
) -> dict[str, list[str]]:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(client: httpx.AsyncClient, doc: Document) -> tuple[str, list[str]]:
        request = prepare_request(api, doc, query)
        async with semaphore:
            r = await client.post(
                f"{url}{request.path}", content=request.body, headers=request.headers
            )
            r.raise_for_status()
            return Path(doc.name).name, response_texts(api, r.json())

    async with httpx.AsyncClient(timeout=600, trust_env=False) as client:
        pairs = await asyncio.gather(*(one(client, d) for d in documents))
    return dict(pairs)


def read_all(
    url: str,
    api: Api,
    documents: Sequence[Document],
    concurrency: int = 1,
    query: Mapping[str, str] | None = None,
) -> dict[str, list[str]]:
    """Every document's lines (file name -> lines), `concurrency` requests at a time.

    Raises:
        httpx.HTTPError: a request failed.
    """
    return asyncio.run(_read_all(url, api, documents, concurrency, query))


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of process `pid`, of its children it reaped, and of its live descendants
    (0 where it is gone)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            cpu = process.cpu_times()
        except psutil.Error:
            continue
        total += cpu.user + cpu.system + cpu.children_user + cpu.children_system
    return total


@dataclass(slots=True)
class ServerRun:
    """A server's answers to lone requests, and its closed-loop levels against them."""

    reference: dict[str, list[str]]
    """File name -> the lines the server gives the page alone (concurrency 1)."""
    levels: list[LevelResult]
    core_s_a_page: list[float]
    """Each level's CPU seconds of the server's whole process tree, a page answered (its
    warm-up requests' pages counted too): what a page costs the machine."""


def measure_server(
    server: ServerProcess,
    api: Api,
    documents: Sequence[Document],
    levels: Sequence[int],
    *,
    requests: int = 0,
    max_time_s: float = 900.0,
    query: Mapping[str, str] | None = None,
) -> ServerRun:
    """Each page alone, then each closed-loop level (`requests` each, 0 = each page once,
    after a warm-up of up to 2 requests) with every answer checked against the lone one."""
    reference = read_all(server.url, api, documents, 1, query)
    ordered = [reference[Path(doc.name).name] for doc in documents]
    results, costs = [], []
    for concurrency in levels:
        cpu_before = tree_cpu_s(server.process.pid)
        result = asyncio.run(
            run_level(
                server.url,
                api,
                documents,
                concurrency=concurrency,
                requests=requests or len(documents),
                warmup=min(concurrency, 2),
                timeout_s=600,
                max_time_s=max_time_s,
                progress=True,
                reference=ordered,
                query=query,
            )
        )
        pages = result.pages + result.warmup_requests - result.warmup_errors
        costs.append(round((tree_cpu_s(server.process.pid) - cpu_before) / max(pages, 1), 3))
        print(
            f"  {server.name} c={concurrency}: {result.throughput_pages_s:.3f} pages/s, "
            f"correct {result.correct_pages_s or 0:.3f}, errors {result.errors}, changed text "
            f"{result.changed}",
            file=sys.stderr,
        )
        results.append(result)
    return ServerRun(reference, results, costs)


def level_dict(result: LevelResult) -> dict[str, Any]:
    """A level's figures as JSON-able data: the per-stage metrics as mean batch rows."""
    data = asdict(result)
    data.pop("metrics", None)
    if result.metrics:
        data["mean_batch_rows"] = {s: m.mean_batch_size for s, m in result.metrics.items()}
    return data


def served_models(url: str) -> dict[str, Any]:
    """Our server's `GET /v1/models`: its model sets, the default, each one's devices."""
    models: dict[str, Any] = httpx.get(f"{url}/v1/models", trust_env=False).json()
    return models


def worker_precisions(url: str) -> dict[str, str]:
    """Each device worker's precision and why, as the server's `/readyz` says."""
    devices = httpx.get(f"{url}/readyz", trust_env=False).json().get("devices", {})
    return {
        name: f"{info.get('precision')} ({info.get('precision_reason')})"
        for name, info in devices.items()
    }


def package_version(venv: Path | None, package: str) -> str:
    """`package`'s installed version in `venv` (None: this Python's); "unknown" if none."""
    python = str(venv / "bin" / "python") if venv is not None else sys.executable
    probe = [python, "-c", f"import importlib.metadata as m; print(m.version({package!r}))"]
    found = subprocess.run(probe, capture_output=True, text=True, check=False)
    return found.stdout.strip() or "unknown"


def engine_limit(
    out: Path, name: str, config_text: str, pages_dir: Path, rounds: int = 1
) -> dict[str, Any]:
    """`python -m loadtest.engine_limit` (one process, page after page, no server) with the
    config `config_text` on the pages in `pages_dir`, its config and result written to
    `out / f"{name}.toml"` and `.json`: pages/s, page times and each page's lines ("texts")."""
    config = out / f"{name}.toml"
    config.write_text(config_text)
    result = out / f"{name}.json"
    command = [sys.executable, "-m", "loadtest.engine_limit", "--config", str(config)]
    command += ["--pages-dir", str(pages_dir), "--json", str(result), "--rounds", str(rounds)]
    subprocess.run(command, check=True)
    data: dict[str, Any] = json.loads(result.read_text())
    return data
