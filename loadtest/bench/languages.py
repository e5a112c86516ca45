"""Documents as they come, measured (issue 36, item 5; issue 46, item 2): pages turned a quarter,
a half and three quarters read as the upright page does, and each language read by every model
set that reads it, which ranks the sets per language.

- Turned pages: the bench's real pages (`engine_limit.real_page_set`), each read upright and
  turned 90, 180 and 270 degrees by the default set with page orientation on (`auto`, the
  default): each angle's CER against the upright page's, which the issue bounds at 0.5 points.
- Languages: Debian's maint-guide in French, German, Spanish, Italian, Japanese, Chinese and
  English (packages maint-guide-fr, -de, -es, -it, -ja, -zh-cn and maint-guide: real documents,
  text layers as the truth; debian-reference's translations are kept out, for an independent
  check), each page read by every set that reads its `lang`: CER of each, per language, and the
  set `ModelSets.pick(lang)` chooses. These CERs are what `models.langs.MEASURED_CER` holds, the
  ranking the server picks a set by (`--table` prints them as that table's entries).

    ocr-bench languages --pages 2
    ocr-bench languages --pages 4 --precision f32 --skip-turned --table

In process, the default config's models (`[models]`, `[models.sets]`), one engine per set.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from loadtest.accuracy import cer
from loadtest.bench import common
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.engine_limit import real_page_set
from models.engine_options import OPENVINO_PRECISION_SETTINGS, OpenVinoPrecisionSetting
from models.langs import set_key
from serving.config import AppConfig, EngineConfig, ModelsConfig
from serving.convert import pdf_pages
from serving.cpus import available_cpus
from serving.engine.local import LocalEngine
from serving.model_sets import ModelSet, ModelSets, load_sets

LANGUAGE_PDFS: dict[str, Path] = {
    **common.LANGUAGE_PDFS,
    "ch": Path("/usr/share/doc/maint-guide-zh-cn/maint-guide.zh-cn.pdf"),
    "en": Path("/usr/share/doc/maint-guide/maint-guide.en.pdf"),
}
"""PaddleOCR language code -> Debian's maint-guide in that language (scripts/system-deps.sh):
the bench's other languages, and Chinese and English, which more than one set reads."""

ANGLES = (90, 180, 270)
MAX_TURNED_LOSS = 0.005
"""How much higher a turned page's CER may be than the upright page's (0.5 points, issue 36)."""


def _engine(
    model_set: ModelSet, threads: int, precision: OpenVinoPrecisionSetting = "auto"
) -> LocalEngine:
    """`model_set`'s det and rec in process as the default set, with the default's classifiers,
    on OpenVINO at `precision`."""
    defaults = ModelsConfig()
    models = dataclasses.replace(
        defaults,
        det=str(model_set.bundle.det.directory),
        rec=str(model_set.bundle.rec.directory),
        sets={},
    )
    engine = EngineConfig(cpu_backend="openvino", cpu_threads=threads, openvino_precision=precision)
    local = LocalEngine(AppConfig(engine=engine, models=models))
    local.load()
    return local


def _text(engine: LocalEngine, image: np.ndarray) -> str:
    return "\n".join(line.text for line in engine.ocr(image).lines)


def turned_pages(engine: LocalEngine, n_pages: int) -> dict[str, Any]:
    """Each angle's CER over the bench's first `n_pages` real pages, and the upright CER."""
    pages = real_page_set(n_pages)
    truth = "\n".join(t for _, _, t in pages)
    result: dict[str, Any] = {"pages": [label for label, _, _ in pages]}
    for angle in (0, *ANGLES):
        read = "\n".join(_text(engine, np.rot90(image, k=angle // 90)) for _, image, _ in pages)
        result[str(angle)] = cer(truth, read)
    return result


def turned_within(turned: dict[str, Any]) -> bool:
    """Whether every angle's CER is within `MAX_TURNED_LOSS` of the upright page's."""
    return all(turned[str(a)] - turned["0"] <= MAX_TURNED_LOSS for a in ANGLES)


def languages(
    engine_of: Callable[[ModelSet], LocalEngine], sets: ModelSets, n_pages: int
) -> dict[str, Any]:
    """Per language: the CER of every set that reads it (by set name, their recognisers and
    detectors named in `models`), and the set its `lang` picks."""
    result: dict[str, Any] = {}
    for lang, pdf in LANGUAGE_PDFS.items():
        if not pdf.is_file():
            result[lang] = {"missing": str(pdf)}
            continue
        readers = [s for s in sets.all if lang in s.langs]
        pages = pdf_pages.text_pages(pdf, n_pages)
        truth = "\n".join(page.text for page in pages)
        result[lang] = {
            "pages": [page.index + 1 for page in pages],
            "cer": {
                s.name: cer(truth, "\n".join(_text(engine_of(s), page.image) for page in pages))
                for s in readers
            },
            "models": {s.name: set_models(s) for s in readers},
            "picked": sets.pick(lang).name,
        }
    return result


def set_models(model_set: ModelSet) -> str:
    """The key `models.langs.MEASURED_CER` knows a set by: its detector's and recogniser's
    official names."""
    return set_key(model_set.bundle.det.model_name, model_set.bundle.rec.model_name)


def measure(
    n_pages: int,
    threads: int,
    precision: OpenVinoPrecisionSetting = "auto",
    *,
    turned: bool = True,
) -> dict[str, Any]:
    """Both checks (the turned pages unless `turned` is false), with the default config's model
    sets, on OpenVINO at `precision`."""
    sets = load_sets(ModelsConfig())
    engines: dict[str, LocalEngine] = {}

    def engine_of(model_set: ModelSet) -> LocalEngine:
        if model_set.name not in engines:
            engines[model_set.name] = _engine(model_set, threads, precision)
        return engines[model_set.name]

    report: dict[str, Any] = {"precision": precision}
    if turned:
        report["turned"] = turned_pages(engine_of(sets.default), n_pages)
    report["languages"] = languages(engine_of, sets, n_pages)
    return report


def markdown_lines(report: dict[str, Any]) -> list[str]:
    """The bench summary's lines for this check."""
    lines = []
    turned = report.get("turned")
    if turned is not None:
        angles = ", ".join(f"{a} {turned[str(a)] * 100:.2f}%" for a in ANGLES)
        verdict = "within" if turned_within(turned) else "NOT within"
        lines.append(
            f"- Turned pages ({len(turned['pages'])} bench pages, page orientation auto): CER "
            f"upright {turned['0'] * 100:.2f}%, turned {angles}: {verdict} "
            f"{MAX_TURNED_LOSS * 100:.1f} points of upright"
        )
    for lang, row in report["languages"].items():
        if "missing" in row:
            lines.append(f"- lang={lang}: no {row['missing']} (scripts/system-deps.sh)")
            continue
        ranked = sorted(row["cer"].items(), key=lambda item: item[1])
        cers = ", ".join(
            f"{name} {value * 100:.2f}%" + (" (picked)" if name == row["picked"] else "")
            for name, value in ranked
        )
        lines.append(
            f"- lang={lang} ({LANGUAGE_PDFS[lang].name} p{', p'.join(map(str, row['pages']))}): "
            f"CER {cers}"
        )
    return lines


def table_lines(report: dict[str, Any]) -> list[str]:
    """The report's CERs as `models.langs.MEASURED_CER`'s entries (rounded to 0.01 points)."""
    lines = []
    for lang, row in report["languages"].items():
        if "missing" in row:
            continue
        entries = ", ".join(
            f"{row['models'][name]!r}: {value * 100:.2f}" for name, value in row["cer"].items()
        )
        lines.append(f"    {lang!r}: {{{entries}}},")
    return lines


@register
class Languages(Scenario):
    """Turned pages and languages, in process."""

    name = "languages"
    help = "pages turned 90/180/270 read as upright; each language by every set that reads it"
    shared = ("out", "pages", "threads", "precision")
    defaults: ClassVar[dict[str, Any]] = {"pages": 2, "precision": ["auto"]}
    precisions = OPENVINO_PRECISION_SETTINGS

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """--skip-turned and --table."""
        parser.add_argument("--skip-turned", action="store_true", help="the languages only")
        parser.add_argument(
            "--table", action="store_true", help="also print the CERs as MEASURED_CER's entries"
        )

    def run(self, args: argparse.Namespace) -> Results:
        """Both checks at each precision asked for; a line each (and MEASURED_CER's entries with
        --table)."""
        reports: dict[str, dict[str, Any]] = {}
        lines: list[str] = []
        cers: dict[str, float] = {}
        for precision in args.precision:
            report = measure(
                args.pages,
                args.threads or available_cpus(),
                precision,
                turned=not args.skip_turned,
            )
            reports[precision] = report
            lines += [f"### {precision}", "", *markdown_lines(report), ""]
            if args.table:
                lines += ["```", *table_lines(report), "```", ""]
            cers.update(
                (f"{precision} lang={lang} {name}", value * 100)
                for lang, row in report["languages"].items()
                if "missing" not in row
                for name, value in row["cer"].items()
            )
        return Results(
            data=reports,
            markdown="\n".join(lines),
            plots={"languages_cer": bars("CER per language and set", "CER %", cers)},
        )
