"""Documents as they come, measured (issue 36, item 5): pages turned a quarter, a half and three
quarters read as the upright page does, and other languages read by the model set their `lang`
picks, beside PP-OCRv5 mobile (the default set) on the same pages.

- Turned pages: the bench's real pages (`engine_limit.real_page_set`), each read upright and
  turned 90, 180 and 270 degrees by the default set with page orientation on (`auto`, the
  default): each angle's CER against the upright page's, which the issue bounds at 0.5 points.
- Languages: Debian's maint-guide in French, German, Spanish, Italian and Japanese (packages
  maint-guide-fr, -de, -es, -it, -ja: real documents, text layers as the truth; debian-reference's
  translations are kept out, for an independent check), each page read by the set
  `ModelSets.pick(lang)` chooses and by the default set: CER of each, per language.

    ocr-bench languages --pages 2

In process, the default config's models (`[models]`, `[models.sets]`), one engine per set.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, ClassVar

import numpy as np

from loadtest.accuracy import cer
from loadtest.bench.common import LANGUAGE_PDFS
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.engine_limit import real_page_set
from serving.config import AppConfig, EngineConfig, ModelsConfig
from serving.convert import pdf_pages
from serving.cpus import available_cpus
from serving.engine.local import LocalEngine
from serving.model_sets import ModelSet, load_sets

ANGLES = (90, 180, 270)
MAX_TURNED_LOSS = 0.005
"""How much higher a turned page's CER may be than the upright page's (0.5 points, issue 36)."""


def _engine(model_set: ModelSet, threads: int) -> LocalEngine:
    """`model_set`'s det and rec in process as the default set, with the default's classifiers."""
    defaults = ModelsConfig()
    models = dataclasses.replace(
        defaults,
        det=str(model_set.bundle.det.directory),
        rec=str(model_set.bundle.rec.directory),
        sets={},
    )
    engine = LocalEngine(
        AppConfig(engine=EngineConfig(cpu_backend="openvino", cpu_threads=threads), models=models)
    )
    engine.load()
    return engine


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
    engines: dict[str, LocalEngine], sets: Any, n_pages: int, threads: int
) -> dict[str, Any]:
    """Per language: the set its `lang` picks and its CER, and the default set's CER."""
    result: dict[str, Any] = {}
    for lang, pdf in LANGUAGE_PDFS.items():
        if not pdf.is_file():
            result[lang] = {"missing": str(pdf)}
            continue
        chosen = sets.pick(lang)
        if chosen.name not in engines:
            engines[chosen.name] = _engine(chosen, threads)
        indices = pdf_pages.select_text_pages(pdf, n_pages)
        images = [pdf_pages.render_pdf_pages(pdf, dpi=150, first=i, count=1)[0] for i in indices]
        truth = "\n".join(pdf_pages.pdf_page_text(pdf, i) for i in indices)
        default = sets.default.name
        result[lang] = {
            "pages": [i + 1 for i in indices],
            "set": chosen.name,
            "cer": cer(truth, "\n".join(_text(engines[chosen.name], im) for im in images)),
            "default_set": default,
            "default_cer": cer(truth, "\n".join(_text(engines[default], im) for im in images)),
        }
    return result


def measure(n_pages: int, threads: int) -> dict[str, Any]:
    """Both checks, with the default config's model sets."""
    sets = load_sets(ModelsConfig())
    engines = {sets.default.name: _engine(sets.default, threads)}
    return {
        "turned": turned_pages(engines[sets.default.name], n_pages),
        "languages": languages(engines, sets, n_pages, threads),
    }


def markdown_lines(report: dict[str, Any]) -> list[str]:
    """The bench summary's lines for this check."""
    turned = report["turned"]
    angles = ", ".join(f"{a} {turned[str(a)] * 100:.2f}%" for a in ANGLES)
    verdict = "within" if turned_within(turned) else "NOT within"
    lines = [
        f"- Turned pages ({len(turned['pages'])} bench pages, page orientation auto): CER upright "
        f"{turned['0'] * 100:.2f}%, turned {angles}: {verdict} "
        f"{MAX_TURNED_LOSS * 100:.1f} points of upright"
    ]
    for lang, row in report["languages"].items():
        if "missing" in row:
            lines.append(f"- lang={lang}: no {row['missing']} (scripts/system-deps.sh)")
            continue
        lines.append(
            f"- lang={lang} ({LANGUAGE_PDFS[lang].name} p{', p'.join(map(str, row['pages']))}): "
            f"{row['set']} CER {row['cer'] * 100:.2f}%, {row['default_set']} "
            f"{row['default_cer'] * 100:.2f}%"
        )
    return lines


@register
class Languages(Scenario):
    """Turned pages and languages, in process."""

    name = "languages"
    help = "pages turned 90/180/270 read as upright; each language by the set its lang picks"
    shared = ("out", "pages", "threads")
    defaults: ClassVar[dict[str, Any]] = {"pages": 2}

    def run(self, args: argparse.Namespace) -> Results:
        """Both checks; a line each."""
        report = measure(args.pages, args.threads or available_cpus())
        cers = {
            f"lang={lang} {key}": row[key] * 100
            for lang, row in report["languages"].items()
            if "missing" not in row
            for key in ("cer", "default_cer")
        }
        return Results(
            data=report,
            markdown="\n".join(markdown_lines(report)) + "\n",
            plots={
                "languages_cer": bars("CER per language: its set, the default set", "CER %", cers)
            },
        )
