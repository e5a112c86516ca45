"""OpenVINO precision per model stage, side by side (issue 41): which layout keeps the text.

Each layout names the detector's and the recogniser's precision ("bf16/f32": detector at bf16,
recogniser at f32; "bf16/bf16": the recogniser with its CTC head in f32, as `"bf16"` serves it;
"bf16/bf16!": every layer at bf16; "int8/f32": the detector's NNCF int8 form, where `make
convert-int8` made it). All are loaded in this process, and each of the bench's real
pages is read by every layout in turn (the order reversed every other round), so drift of a shared
machine falls on all alike. Printed per layout: pages/s over the real pages, and per language (en,
zh, and the synthetic test pages) CER and merged words (`loadtest.accuracy.merged_words`)::

    ocr-bench precision-layouts --pages 8 --layouts f32/f32,bf16/f32,bf16/bf16
    ocr-bench precision-layouts --det embedded:PP-OCRv6_small_det \\
        --rec embedded:PP-OCRv6_small_rec

The synthetic pages are the test suite's (`tests/images.py`: the invoice lines where whole-model
bf16 read "Totalamount", the Chinese lines, and two dense pages). On a CPU without bf16 every
layout runs f32.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadtest.accuracy import cer, merged_words
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.engine_limit import real_page_set
from models.openvino_backend import OpenVinoPredictor
from serving.config import AppConfig, EngineConfig, ModelsConfig
from serving.cpus import available_cpus
from serving.engine.local import LocalEngine

PRECISIONS = ("f32", "bf16", "int8")
"""The precisions a stage of a layout can run at."""
DEFAULT_LAYOUTS = "f32/f32,bf16/f32,f32/bf16,bf16/bf16,bf16/bf16!"


@dataclass(frozen=True, slots=True)
class Layout:
    """A precision for the detector and one for the recogniser (`"bf16"`, `"f32"`, `"int8"`)."""

    det: str
    rec: str
    rec_f32_head: bool = True

    @classmethod
    def parse(cls, text: str) -> Layout:
        """ "det/rec", a trailing "!" on rec for every layer at bf16."""
        det, _, rec = text.partition("/")
        if det not in PRECISIONS or rec.rstrip("!") not in PRECISIONS:
            raise ValueError(f"a layout is det/rec of {', '.join(PRECISIONS)}, got {text!r}")
        return cls(det, rec.rstrip("!"), not rec.endswith("!"))

    def __str__(self) -> str:
        return f"{self.det}/{self.rec}{'' if self.rec_f32_head else '!'}"


def load(layout: Layout, threads: int, models: ModelsConfig | None = None) -> LocalEngine:
    """`models` (the default ones when None) in process, each stage's OpenVINO predictor at its
    layout's precision."""
    engine = LocalEngine(
        AppConfig(
            engine=EngineConfig(cpu_backend="openvino", cpu_threads=threads),
            models=models or ModelsConfig(),
        )
    )
    pin_precisions(engine, layout.det, layout.rec, openvino_f32_head=layout.rec_f32_head)
    engine.load()
    return engine


def pin_precisions(engine: LocalEngine, det: str, rec: str, **options: Any) -> None:
    """Before `engine.load()`: its detector and recogniser on OpenVINO at `det` and `rec` as
    asked, not what this CPU's check keeps (`openvino_check` off), with `options` beside."""
    for stage, precision in (("det", det), ("rec", rec)):
        predictor = engine.predictors[stage]
        if not isinstance(predictor, OpenVinoPredictor):
            raise TypeError(f"{stage} is not served by OpenVINO here")
        pinned = dataclasses.replace(
            predictor.options,
            openvino_precision=precision,  # type: ignore[arg-type]
            openvino_check=False,
            **options,
        )
        engine.predictors[stage] = OpenVinoPredictor(predictor.spec, pinned)


def language(page: str) -> str:
    """ "synthetic", "zh" (the Chinese PDF's pages) or "en"."""
    if page.startswith("synthetic:"):
        return "synthetic"
    return "zh" if "zh-cn" in page else "en"


def synthetic_pages() -> dict[str, tuple[np.ndarray, str]]:
    """The test suite's synthetic pages (tests/images.py), with their lines as the truth."""
    from tests import images  # the suite's renderer: only where the checkout has it

    chosen = {"latin": images.latin_lines(), "chinese": images.chinese_lines()}
    chosen |= {"dense0": images.dense_page(0), "dense1": images.dense_page(1)}
    return {f"synthetic:{n}": (t.image, "\n".join(t.lines)) for n, t in chosen.items()}


def measure(
    layouts: Sequence[Layout],
    pages: dict[str, tuple[np.ndarray, str]],
    rounds: int,
    threads: int,
    models: ModelsConfig | None = None,
) -> list[dict[str, Any]]:
    """A row per layout: pages/s on the real pages, CER and merged words per language."""
    engines = {layout: load(layout, threads, models) for layout in layouts}
    seconds = dict.fromkeys(layouts, 0.0)
    texts: dict[Layout, dict[str, str]] = {layout: {} for layout in layouts}
    for layout, engine in engines.items():  # warm up, and read the synthetic pages once
        for name, (image, _) in pages.items():
            if language(name) == "synthetic":
                texts[layout][name] = "\n".join(ln.text for ln in engine.ocr(image).lines)
    real = [name for name in pages if language(name) != "synthetic"]
    for round_ in range(rounds):
        for name in real:
            for layout in layouts if round_ % 2 == 0 else layouts[::-1]:
                started = time.perf_counter()
                result = engines[layout].ocr(pages[name][0])
                seconds[layout] += time.perf_counter() - started
                texts[layout][name] = "\n".join(ln.text for ln in result.lines)
    return [
        {
            "layout": str(layout),
            "pages_s": round(rounds * len(real) / seconds[layout], 4),
            "scores": {
                lang: {"cer": lang_cer, "merged_words": merged}
                for lang, (lang_cer, merged) in score(pages, texts[layout]).items()
            },
        }
        for layout in layouts
    ]


def row_line(row: dict[str, Any]) -> str:
    """A layout's line: pages/s, then CER and merged words per language."""
    line = f"- {row['layout']:11} {row['pages_s']:.3f} pages/s"
    for lang, got in row["scores"].items():
        line += f" | {lang} CER {got['cer'] * 100:.2f}% merged {got['merged_words']}"
    return line


def score(
    pages: dict[str, tuple[np.ndarray, str]], texts: dict[str, str]
) -> dict[str, tuple[float, int]]:
    """Per language (en, zh, synthetic, those with pages): the CER of its pages' `texts`
    together, and their merged words."""
    scores = {}
    for lang in ("en", "zh", "synthetic"):
        names = [n for n in pages if language(n) == lang]
        if not names:
            continue
        truth = "\n".join(pages[n][1] for n in names)
        read = "\n".join(texts[n] for n in names)
        merged = sum(merged_words(pages[n][1], texts[n]) for n in names)
        scores[lang] = (cer(truth, read), merged)
    return scores


@register
class PrecisionLayouts(Scenario):
    """Each stage's OpenVINO precision, side by side in one process."""

    name = "precision-layouts"
    help = "OpenVINO precision per stage (det/rec layouts), interleaved in one process"
    shared = ("out", "pages", "threads", "repeats")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument(
            "--layouts",
            type=lambda text: [Layout.parse(x) for x in text.split(",") if x],
            default=[Layout.parse(x) for x in DEFAULT_LAYOUTS.split(",")],
            help=f"det/rec precisions, a trailing ! all layers at bf16 (default {DEFAULT_LAYOUTS})",
        )
        parser.add_argument("--det", help="detector (default: the default set's), embedded:NAME")
        parser.add_argument("--rec", help="recogniser (default: the default set's)")

    def run(self, args: argparse.Namespace) -> Results:
        """Every layout on the real and the synthetic pages; `--repeats` rounds of the real."""
        defaults = ModelsConfig()
        models = dataclasses.replace(
            defaults, det=args.det or defaults.det, rec=args.rec or defaults.rec
        )
        pages = {label: (image, truth) for label, image, truth in real_page_set(args.pages)}
        pages.update(synthetic_pages())
        threads = args.threads or available_cpus()
        rows = measure(args.layouts, pages, args.repeats, threads, models)
        return Results(
            data={"det": models.det, "rec": models.rec, "rows": rows},
            markdown=f"{models.det} / {models.rec}\n\n" + "\n".join(map(row_line, rows)) + "\n",
            plots={
                "pages_s": bars("Layouts", "pages/s", {r["layout"]: r["pages_s"] for r in rows})
            },
        )
