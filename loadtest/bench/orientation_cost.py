"""What page orientation (`pipeline.orientation = "auto"`) costs, and whether it turns an upright
page: the figures behind its default (docs/models.md).

    python -m loadtest.bench.orientation_cost [--pages 8] [--rounds 3] [--dpi 150]

Cost: the bench's real pages read in this process on the configured CPU engine, each page with
orientation off and auto one after the other (the machine's drift falls on both), `rounds`
times; pages/s is pages over the summed seconds. The server runs the same steps, the classifier
batched in its own queue, so its pages/s moves by about the same share. Upright pages: every text
page of the real PDFs (the bench's and more) classified as sent; any turned is a wrong turn;
the classifier's own time on them (its input prepared, one page a run) is the part of the cost
that a busy, shared machine's drift does not blur.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np

from loadtest.engine_limit import real_page_set
from pipelines.page_orientation import classify_page, resize_ori
from pipelines.pixels import normalize
from serving.config import AppConfig, build
from serving.convert import pdf_pages
from serving.engine.local import LocalEngine
from serving.request_options import ocr_options


def upright_turns(engine: LocalEngine, dpi: float) -> dict[str, object]:
    """Every text page of the real PDFs through the classifier alone: how many it would turn."""
    ori = engine.predictors["ori"]
    spec = engine.bundle.ori
    if spec is None or spec.ori_params is None:
        raise RuntimeError("no page-orientation model configured (models.ori)")
    params = dataclasses.replace(
        spec.ori_params, min_score=engine.config.pipeline.orientation_min_score
    )
    turned: list[str] = []
    scores: list[float] = []
    classify_s = 0.0
    for pdf in pdf_pages.find_real_pdfs():
        indices = pdf_pages.select_text_pages(pdf, pdf_pages.pdf_page_count(pdf))
        for index in indices:
            (image,) = pdf_pages.render_pdf_pages(pdf, dpi=dpi, first=index, count=1)
            start = time.perf_counter()
            batch = normalize("ori", resize_ori(image, params)[np.newaxis])
            found = classify_page(ori.run(batch), params)
            classify_s += time.perf_counter() - start
            scores.append(found.score)
            if found.turned:
                turned.append(f"{pdf.name} p{index + 1}: {found.angle} ({found.score:.3f})")
    return {
        "upright_pages": len(scores),
        "turned": turned,
        "min_score": round(min(scores), 4) if scores else None,
        "classifier_ms_per_page": round(1000 * classify_s / max(len(scores), 1), 2),
    }


def cost(engine: LocalEngine, n_pages: int, rounds: int, dpi: float) -> dict[str, object]:
    """Seconds per page with orientation off and auto, interleaved page by page."""
    page_set = real_page_set(n_pages, dpi)
    modes = {
        mode: ocr_options(engine.bundle, engine.config.pipeline, orientation=mode)
        for mode in ("off", "auto")
    }
    seconds = dict.fromkeys(modes, 0.0)
    for _, image, _ in page_set:  # warm: every shape once
        for options in modes.values():
            engine.ocr(image, options)
    for _ in range(rounds):
        for _, image, _ in page_set:
            for mode, options in modes.items():
                start = time.perf_counter()
                engine.ocr(image, options)
                seconds[mode] += time.perf_counter() - start
    total = len(page_set) * rounds
    rates = {mode: total / s for mode, s in seconds.items()}
    return {
        "pages": len(page_set),
        "rounds": rounds,
        "pages_per_s": {mode: round(rate, 3) for mode, rate in rates.items()},
        "auto_cost_share": round(1 - rates["auto"] / rates["off"], 4),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dpi", type=float, default=150.0)
    args = parser.parse_args(argv)
    engine = LocalEngine(build(AppConfig, {}))
    engine.load()
    report = {
        "engine": engine.config.engine.cpu_backend,
        "upright": upright_turns(engine, args.dpi),
        "cost": cost(engine, args.pages, args.rounds, args.dpi),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
