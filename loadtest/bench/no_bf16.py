"""The default set on a CPU without bf16 (issue 46 item 5): PP-OCRv6 small at f32 and at int8
against PP-OCRv5 mobile at f32, in CPU seconds per page, per stage, with the text they read.

Every variant is loaded in this process (OpenVINO, `--threads` each, one thread by default: a
device worker's), and each of `make bench`'s pages (`loadtest.bench.common.kind_pages`: English,
Chinese, poor scans, French, German, Spanish) is read by every variant in turn, the order
reversed every other round, so the drift of a shared machine falls on all alike. Printed per
variant: CPU seconds a page (the process's, all its threads) and its ratio to the first
variant's, the detector's and the recogniser's CPU seconds a page, and per kind of page CER,
merged words and word F1 (`loadtest.bench.common.text_scores`), plus the merged words of the
test suite's synthetic pages (read once, untimed).

A variant is `SET:DET/REC[@TYPE:SIDE]`: SET `v5` (PP-OCRv5 mobile) or `v6` (PP-OCRv6 small),
each stage's precision (`f32`, `bf16`, `int8`: NNCF's int8 form in `--onnx-dir`, made by
`python -m serving.convert --int8`), and optionally the detector's resize (`[pipeline.det]
limit_type` and `limit_side_len`, `@max:1280`: fewer detector pixels)::

    ocr-bench no-bf16 --pages 12 --onnx-dir var/models/onnx \\
        --variants v5:f32/f32,v6:f32/f32,v6:int8/f32,v6:f32/int8,v6:int8/int8
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, get_args

import numpy as np

from loadtest.accuracy import merged_words
from loadtest.bench.choice import DEFAULT_KINDS
from loadtest.bench.common import Page, kind_pages, text_scores
from loadtest.bench.precision_layouts import PRECISIONS, pin_precisions, synthetic_pages
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from models.openvino_backend import OpenVinoPredictor
from pipelines.types import LimitType
from serving.config import AppConfig, DetPipelineConfig, EngineConfig, ModelsConfig, PipelineConfig
from serving.engine.local import LocalEngine

SETS = {
    "v5": ("embedded:PP-OCRv5_mobile_det", "embedded:PP-OCRv5_mobile_rec"),
    "v6": ("embedded:PP-OCRv6_small_det", "embedded:PP-OCRv6_small_rec"),
}
"""A variant's model set: its detector and recogniser."""
DEFAULT_VARIANTS = "v5:f32/f32,v6:f32/f32,v6:int8/f32,v6:f32/int8,v6:int8/int8"


@dataclass(frozen=True, slots=True)
class Variant:
    """A model set, each stage's OpenVINO precision, and the detector's resize."""

    set: str
    det: str
    rec: str
    limit_type: LimitType | None = None
    """None = the config's (`min`, 64: the page's own pixels up to 4000)."""
    limit_side_len: int = 0

    @classmethod
    def parse(cls, text: str) -> Variant:
        """`SET:DET/REC[@TYPE:SIDE]`."""
        name, _, rest = text.partition(":")
        layout, _, resize = rest.partition("@")
        det, _, rec = layout.partition("/")
        if name not in SETS or det not in PRECISIONS or rec not in PRECISIONS:
            raise ValueError(
                f"a variant is SET:DET/REC[@TYPE:SIDE], SET of {', '.join(SETS)}, precisions of "
                f"{', '.join(PRECISIONS)}; got {text!r}"
            )
        if not resize:
            return cls(name, det, rec)
        limit_type, _, side = resize.partition(":")
        if limit_type not in get_args(LimitType) or not side.isdigit():
            raise ValueError(f"a resize is @min|max|resize_long:SIDE, got {text!r}")
        return cls(name, det, rec, cast(LimitType, limit_type), int(side))

    def __str__(self) -> str:
        resize = f"@{self.limit_type}:{self.limit_side_len}" if self.limit_type else ""
        return f"{self.set}:{self.det}/{self.rec}{resize}"


class StageClock:
    """CPU seconds spent in one predictor's batches (its runner wrapped)."""

    def __init__(self) -> None:
        self.cpu_s = 0.0

    def wrap(self, run: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
        """`run`, timed."""

        def timed(batch: np.ndarray) -> np.ndarray:
            started = time.process_time()
            try:
                return run(batch)
            finally:
                self.cpu_s += time.process_time() - started

        return timed


def load(
    variant: Variant, threads: int, onnx_dir: str
) -> tuple[LocalEngine, dict[str, StageClock]]:
    """The variant's det and rec in process at its precisions (unchecked: as asked), no page
    classifier; each stage's clock."""
    det_ref, rec_ref = SETS[variant.set]
    det_config = DetPipelineConfig()
    if variant.limit_type:
        det_config = dataclasses.replace(
            det_config, limit_type=variant.limit_type, limit_side_len=variant.limit_side_len
        )
    config = AppConfig(
        models=ModelsConfig(det=det_ref, rec=rec_ref, ori="", sets={}),
        engine=EngineConfig(cpu_backend="openvino", cpu_threads=threads, onnx_dir=onnx_dir),
        pipeline=dataclasses.replace(PipelineConfig(), det=det_config),
    )
    engine = LocalEngine(config)
    pin_precisions(engine, variant.det, variant.rec)
    engine.load()
    clocks = {}
    for stage in ("det", "rec"):
        predictor = engine.predictors[stage]
        assert isinstance(predictor, OpenVinoPredictor)
        clocks[stage] = StageClock()
        predictor.replace_runner(clocks[stage].wrap)
    return engine, clocks


def lines(engine: LocalEngine, image: np.ndarray) -> list[str]:
    """The page's lines as the engine reads them."""
    return [line.text for line in engine.ocr(image).lines]


def measure(
    variants: Sequence[Variant],
    pages: Sequence[Page],
    rounds: int,
    threads: int,
    onnx_dir: str,
    synthetic: dict[str, tuple[np.ndarray, str]],
) -> list[dict[str, Any]]:
    """A row per variant: CPU and wall seconds a page, per stage, and the text's scores."""
    loaded = {v: load(v, threads, onnx_dir) for v in variants}
    cpu = dict.fromkeys(variants, 0.0)
    wall = dict.fromkeys(variants, 0.0)
    texts: dict[Variant, dict[str, list[str]]] = {v: {} for v in variants}
    merged = dict.fromkeys(variants, 0)
    for variant, (engine, clocks) in loaded.items():  # warm up; the synthetic pages, untimed
        for image, truth in synthetic.values():
            merged[variant] += merged_words(truth, "\n".join(lines(engine, image)))
        for clock in clocks.values():
            clock.cpu_s = 0.0
    for round_ in range(rounds):
        for page in pages:
            for variant in variants if round_ % 2 == 0 else variants[::-1]:
                engine, _ = loaded[variant]
                started, started_cpu = time.perf_counter(), time.process_time()
                read = lines(engine, page.image)
                cpu[variant] += time.process_time() - started_cpu
                wall[variant] += time.perf_counter() - started
                texts[variant][page.file_name] = read
    count = rounds * len(pages)
    first = variants[0]
    return [
        {
            "variant": str(v),
            "cpu_s_page": round(cpu[v] / count, 4),
            "cpu_ratio": round(cpu[first] / cpu[v], 3),
            "pages_s": round(count / wall[v], 4),
            "det_cpu_s_page": round(loaded[v][1]["det"].cpu_s / count, 4),
            "rec_cpu_s_page": round(loaded[v][1]["rec"].cpu_s / count, 4),
            "scores": text_scores(pages, texts[v]),
            "synthetic_merged_words": merged[v],
            "texts": texts[v],
        }
        for v in variants
    ]


def table(rows: list[dict[str, Any]], kinds: Sequence[str]) -> str:
    """Markdown: a row per variant."""
    head = (
        "| variant | CPU s/page | speed vs first | det CPU s | rec CPU s | pages/s | CER all "
        "| merged all | F1 all | " + " | ".join(f"{k} CER" for k in kinds) + " | synthetic merged |"
    )
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        s = r["scores"]
        out.append(
            f"| {r['variant']} | {r['cpu_s_page']:.3f} | {r['cpu_ratio']:.2f}x "
            f"| {r['det_cpu_s_page']:.3f} | {r['rec_cpu_s_page']:.3f} | {r['pages_s']:.3f} "
            f"| {s['all']['cer'] * 100:.2f}% | {s['all']['merged_words']} "
            f"| {s['all']['word_f1']:.4f} | "
            + " | ".join(
                f"{s[k]['cer'] * 100:.2f}% m{s[k]['merged_words']}" if k in s else "-"
                for k in kinds
            )
            + f" | {r['synthetic_merged_words']} |"
        )
    return "\n".join(out) + "\n"


@register
class NoBf16(Scenario):
    """PP-OCRv6 small at f32 and int8 against PP-OCRv5 mobile at f32, interleaved in process."""

    name = "no-bf16"
    help = "a CPU without bf16: v6 small f32/int8 against v5 mobile f32, CPU s a page, per stage"
    shared = ("out", "pages", "dpi", "threads", "repeats")
    defaults = {"pages": 12}  # noqa: RUF012 (a ClassVar of Scenario)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument(
            "--variants",
            type=lambda text: [Variant.parse(x) for x in text.split(",") if x],
            default=[Variant.parse(x) for x in DEFAULT_VARIANTS.split(",")],
            help=f"SET:DET/REC[@TYPE:SIDE], comma-separated (default {DEFAULT_VARIANTS})",
        )
        parser.add_argument(
            "--onnx-dir",
            type=Path,
            default=Path(EngineConfig().onnx_dir),
            help="the conversions and their int8 forms ([engine] onnx_dir)",
        )

    def run(self, args: argparse.Namespace) -> Results:
        """Every variant on the same pages, `--repeats` rounds."""
        pages = kind_pages(args.pages, DEFAULT_KINDS, args.dpi)
        threads = args.threads or 1
        rows = measure(
            args.variants, pages, args.repeats, threads, str(args.onnx_dir), synthetic_pages()
        )
        return Results(
            data={"threads": threads, "pages": [p.file_name for p in pages], "rows": rows},
            markdown=f"{len(pages)} pages x {args.repeats} rounds, {threads} thread(s)\n\n"
            + table(rows, DEFAULT_KINDS),
            plots={
                "cpu_s_page": bars(
                    "CPU seconds a page", "s", {r["variant"]: r["cpu_s_page"] for r in rows}
                )
            },
        )
