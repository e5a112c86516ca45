"""The torch engine's precision per model stage on the CPU, side by side (issue 40): which layout
keeps fp32's text on the synthetic test pages, the stand-in for a GPU's fp16.

Each layout names the detector's and the recogniser's precision ("fp16/fp32": detector at fp16,
recogniser at fp32). One engine is loaded; each layout sets its models' precision and reads the
test pages (`tests/images.py`: the invoice lines, the Chinese lines and a dense page). Printed per
layout and language: CER against fp32's text (what `tests/integration/test_torch_half.py` bounds
at 0.1 points), CER against the pages' own text, merged words (`loadtest.accuracy.merged_words`)
and the seconds the pages took, then each line read differently::

    python -m loadtest.bench.torch_precision fp16/fp32 fp32/fp16 fp16/fp16 bf16/fp32 fp32/bf16
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from loadtest.accuracy import merged_words, pages_cer
from models.engine_options import PRECISIONS, Precision
from serving.config import AppConfig, EngineConfig, ModelsConfig, WorkersConfig
from serving.engine.local import LocalEngine

LANGUAGES = {"latin": ("latin", "dense"), "chinese": ("chinese",)}


def parse_layout(text: str) -> tuple[Precision, Precision]:
    """ "det/rec" -> (det's precision, rec's)."""
    det, _, rec = text.partition("/")
    if det not in PRECISIONS or rec not in PRECISIONS:
        raise argparse.ArgumentTypeError(f"{text!r}: want DET/REC, each one of {PRECISIONS}")
    return det, rec


def set_precision(engine: LocalEngine, stage: str, precision: Precision) -> None:
    """Run `stage`'s torch model at `precision` from its next forward (each forward reads it)."""
    predictor: Any = engine.predictors[stage]
    predictor._options = dataclasses.replace(predictor.options, precision=precision)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("layouts", nargs="+", type=parse_layout, help="DET/REC, e.g. fp16/fp32")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    from tests import images  # the test pages: a bench of the test suite's stand-in

    pages = {
        "latin": images.latin_lines(),
        "chinese": images.chinese_lines(),
        "dense": images.dense_page(),
    }
    engine_config = dataclasses.replace(
        EngineConfig(), cpu_backend="torch", cpu_threads=args.threads, precision="fp32"
    )
    engine = LocalEngine(
        AppConfig(
            models=ModelsConfig(ori="", sets={}),
            engine=engine_config,
            workers=dataclasses.replace(WorkersConfig(), devices=("cpu",)),
        )
    )
    engine.load()

    def read() -> tuple[dict[str, list[str]], float]:
        started = time.monotonic()
        texts = {n: [ln.text for ln in engine.ocr(p.image).lines] for n, p in pages.items()}
        return texts, time.monotonic() - started

    base, base_s = read()
    for det, rec in [("fp32", "fp32"), *args.layouts]:
        set_precision(engine, "det", det)
        set_precision(engine, "rec", rec)
        got, seconds = (base, base_s) if (det, rec) == ("fp32", "fp32") else read()
        for language, names in LANGUAGES.items():
            vs_fp32 = pages_cer({n: "\n".join(base[n]) for n in names}, got)
            truth = pages_cer({n: "\n".join(pages[n].lines) for n in names}, got)
            merged = sum(merged_words("\n".join(pages[n].lines), "\n".join(got[n])) for n in names)
            print(
                f"{det}/{rec} {language}: {vs_fp32 * 100:.3f} CER points vs fp32, "
                f"CER {truth * 100:.3f}%, merged words {merged}, pages {seconds:.0f} s"
            )
        for name, lines in got.items():
            if lines != base[name]:
                changed = [(a, b) for a, b in zip(base[name], lines, strict=False) if a != b]
                print(f"    {name}: {len(base[name])} lines at fp32, {len(lines)}; {changed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
