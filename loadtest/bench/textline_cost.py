"""What the packaged textline classifier (`embedded:ch_ppocr_mobile_v2.0_cls`, rapidocr's wheel)
costs and does on upright pages: the figures behind `pipeline.use_textline_orientation`'s default.

    python -m loadtest.bench.textline_cost [--pages 8] [--dpi 150]

The bench's real pages, read in this process on the configured CPU engine with the classifier
off and on, one after the other page by page (the machine's drift falls on both): pages/s, the
classifier's own share of the time, the lines it turned on these upright pages, and CER against
the pages' text layers either way.
"""

from __future__ import annotations

import argparse
import json
import time

from loadtest.accuracy import cer
from loadtest.engine_limit import real_page_set
from models.packaged import TEXTLINE_MODEL
from serving.config import AppConfig, build
from serving.engine.local import LocalEngine
from serving.request_options import ocr_options


class _Timed:
    """A predictor whose `run` time is added up."""

    def __init__(self, predictor: object) -> None:
        self.predictor = predictor
        self.seconds = 0.0

    def __getattr__(self, name: str) -> object:
        return getattr(self.predictor, name)

    def run(self, batch: object) -> object:
        start = time.perf_counter()
        try:
            return self.predictor.run(batch)  # type: ignore[attr-defined]
        finally:
            self.seconds += time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--dpi", type=float, default=150.0)
    args = parser.parse_args(argv)
    config = build(AppConfig, {"models": {"cls": f"embedded:{TEXTLINE_MODEL}"}})
    engine = LocalEngine(config)
    engine.load()
    timed = _Timed(engine.predictors["cls"])
    engine.predictors["cls"] = timed  # type: ignore[assignment]
    modes = {
        mode: ocr_options(
            engine.bundle, config.pipeline, textline_orientation=mode == "on", orientation="off"
        )
        for mode in ("off", "on")
    }
    seconds = dict.fromkeys(modes, 0.0)
    errors: dict[str, list[float]] = {mode: [] for mode in modes}
    turned = lines = 0
    page_set = real_page_set(args.pages, args.dpi)
    for _, image, truth in page_set:
        for mode, options in modes.items():
            start = time.perf_counter()
            result = engine.ocr(image, options)
            seconds[mode] += time.perf_counter() - start
            errors[mode].append(cer(truth, "\n".join(line.text for line in result.lines)))
            if mode == "on":
                turned += sum(1 for o in result.orientations if o == 1)
                lines += len(result.orientations)
    rates = {mode: len(page_set) / s for mode, s in seconds.items()}
    report = {
        "engine": config.engine.cpu_backend,
        "pages": len(page_set),
        "pages_per_s": {mode: round(rate, 3) for mode, rate in rates.items()},
        "cost_share": round(1 - rates["on"] / rates["off"], 4),
        "classifier_share_of_on": round(timed.seconds / seconds["on"], 4),
        "upright_lines_turned": f"{turned} of {lines}",
        "cer": {mode: round(sum(e) / len(e), 4) for mode, e in errors.items()},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
