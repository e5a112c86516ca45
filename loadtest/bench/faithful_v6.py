"""A faithful PP-OCRv6 small (issue 46, item 6): our text against a reference that reads the same
ONNX models with PaddleOCR's pre- and post-processing, on the bench's real pages, at f32.

The reference is RapidOCR 3.10 (`rapidocr`, its own implementation of PaddleOCR's detection
resize, DB post-processing, crop, recognition resize and CTC decoding) configured with
PaddleOCR's settings exactly as `make bench` configures it for PP-OCRv5
(`loadtest.servers.rapidocr_params`: our detection and recognition settings, PaddleOCR's
detector normalisation, no classifier), on ONNX Runtime (f32), in process. Ours is the default
set read by `LocalEngine` on OpenVINO at f32 (the precision every CPU has; `--backend onnxruntime`
for the same engine as the reference). The check holds when ours and the reference's CER against
the pages' text layers are within `MAX_CER_GAP` (0.1 points); the CER of ours against the
reference's text says how far the two texts are apart.

    ocr-bench faithful-v6 --pages 8
    ocr-bench faithful-v6 --pages 8 --reference paddleocr

`--reference paddleocr` reads the pages with PaddleOCR 3.7's own pipeline instead
(`PaddleOCR(...).predict`, oneDNN off, as `tests/reference.py`), on Paddle, on PP-OCRv6 small's
X2Paddle conversion (`make convert-paddle`): PaddleOCR's processing itself, on the same weights
through another engine.

RapidOCR is imported from this environment: `make install-test` installs its wheel (for its
models, `--no-deps`) and omegaconf, the one requirement it imports that the project has not.
`tests/integration/test_faithful_v6.py` runs it on 4 pages in `make test`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from loadtest.accuracy import cer
from loadtest.bench.results import Results
from loadtest.bench.scenario import Scenario, register
from loadtest.engine_limit import real_page_set
from loadtest.onnx_export import OnnxModels, write_keys
from loadtest.servers import rapidocr_params
from models import paddle_convert
from models.bundle import ModelBundle, load_bundle
from serving.config import AppConfig, EngineConfig, ModelsConfig
from serving.engine.local import LocalEngine
from serving.request_options import ocr_options

MAX_CER_GAP = 0.001
"""How far our CER may be from the reference's: 0.1 points (issue 46, item 6)."""

Reader = Callable[[np.ndarray], list[str]]
"""A page's lines of text, in reading order, from a BGR image."""


def default_bundle() -> ModelBundle:
    """The default set's detector and recogniser (PP-OCRv6 small), no classifiers."""
    models = ModelsConfig()
    return load_bundle(models.det, models.rec)


def reference_reader(bundle: ModelBundle, keys_dir: Path, threads: int) -> Reader:
    """RapidOCR on `bundle`'s ONNX files with PaddleOCR's settings, on ONNX Runtime.

    Raises:
        ImportError: rapidocr (or omegaconf) is not installed here.
        ValueError: the models are not ONNX files.
    """
    from rapidocr import EngineType, RapidOCR

    if bundle.det.onnx_file is None or bundle.rec.onnx_file is None:
        raise ValueError(f"{bundle.det.directory}, {bundle.rec.directory}: not ONNX models")
    models = OnnxModels(
        bundle.det.onnx_file, bundle.rec.onnx_file, write_keys(bundle.rec, keys_dir / "keys.txt")
    )
    options = ocr_options(bundle, AppConfig().pipeline)
    params: dict[str, Any] = rapidocr_params(options, models, threads, "onnxruntime")
    params.update({"Global.log_level": "warning", "Global.use_vertical_padding": False})
    for key in [k for k in params if k.endswith(".engine_type")]:
        params[key] = EngineType(params[key])
    engine = RapidOCR(params=params)

    def read(image: np.ndarray) -> list[str]:
        texts = getattr(engine(image), "txts", None)  # no lines: an answer without txts
        return [str(text) for text in texts or ()]

    return read


def paddleocr_reader(bundle: ModelBundle, paddle_dir: Path) -> Reader:
    """PaddleOCR 3.7's pipeline on `bundle`'s X2Paddle conversions in `paddle_dir`.

    Raises:
        ModelConversionError: a model has no conversion there (the message names the command).
    """
    import paddleocr

    det, rec = (paddle_convert.paddle_spec(s, paddle_dir) for s in (bundle.det, bundle.rec))
    os.environ.setdefault("PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK", "True")  # no network
    pipeline = paddleocr.PaddleOCR(
        text_detection_model_name=bundle.det.model_name,
        text_detection_model_dir=str(det.directory),
        text_recognition_model_name=bundle.rec.model_name,
        text_recognition_model_dir=str(rec.directory),
        use_doc_orientation_classify=False,
        use_doc_unwarping=False,
        use_textline_orientation=False,
        device="cpu",
        enable_mkldnn=False,
    )

    def read(image: np.ndarray) -> list[str]:
        return [str(text) for text in pipeline.predict(image)[0].json["res"]["rec_texts"]]

    return read


def our_reader(bundle: ModelBundle, threads: int, backend: str = "openvino") -> Reader:
    """Our pipeline on `bundle` in process, at f32, with no classifiers (as the reference)."""
    models = dataclasses.replace(
        ModelsConfig(), det=str(bundle.det.directory), rec=str(bundle.rec.directory)
    )
    models = dataclasses.replace(models, sets={}, ori="", cls="")
    engine = EngineConfig(cpu_backend=backend, cpu_threads=threads, openvino_precision="f32")
    local = LocalEngine(AppConfig(engine=engine, models=models))
    local.load()

    def read(image: np.ndarray) -> list[str]:
        return [line.text for line in local.ocr(image).lines]

    return read


def compare(
    pages: Sequence[tuple[str, np.ndarray, str]], ours: Reader, reference: Reader
) -> dict[str, Any]:
    """Each page's CER for both readers against its text layer, and ours against the
    reference's text; the totals over all pages (texts joined) and the verdict."""
    rows: dict[str, Any] = {}
    truths, our_texts, ref_texts = [], [], []
    for label, image, truth in pages:
        mine, theirs = "\n".join(ours(image)), "\n".join(reference(image))
        rows[label] = {
            "cer": cer(truth, mine),
            "reference_cer": cer(truth, theirs),
            "cer_vs_reference": cer(theirs, mine),
            "same_text": mine == theirs,
        }
        truths.append(truth)
        our_texts.append(mine)
        ref_texts.append(theirs)
    truth, mine, theirs = "\n".join(truths), "\n".join(our_texts), "\n".join(ref_texts)
    total = {"cer": cer(truth, mine), "reference_cer": cer(truth, theirs)}
    total["cer_vs_reference"] = cer(theirs, mine)
    total["within"] = abs(total["cer"] - total["reference_cer"]) <= MAX_CER_GAP
    return {"pages": rows, "total": total}


REFERENCES = {
    "rapidocr": "RapidOCR 3.10, ONNX Runtime, PaddleOCR's settings",
    "paddleocr": "PaddleOCR 3.7's pipeline, Paddle on X2Paddle's conversion",
}


def measure(
    n_pages: int, threads: int, backend: str = "openvino", reference: str = "rapidocr"
) -> dict[str, Any]:
    """`compare` on the bench's first `n_pages` real pages, with the default set's models,
    against `reference` (a key of `REFERENCES`)."""
    bundle = default_bundle()
    with tempfile.TemporaryDirectory() as keys_dir:
        if reference == "paddleocr":
            theirs = paddleocr_reader(bundle, Path(EngineConfig().paddle_dir))
        else:
            theirs = reference_reader(bundle, Path(keys_dir), threads)
        report = compare(real_page_set(n_pages), our_reader(bundle, threads, backend), theirs)
    report["models"] = {"det": bundle.det.model_name, "rec": bundle.rec.model_name}
    report["ours"] = f"{backend} f32"
    report["reference"] = REFERENCES[reference]
    return report


def markdown_lines(report: dict[str, Any]) -> list[str]:
    """The check's summary: per page and in all, both CERs and how far the texts are apart."""
    total = report["total"]
    verdict = "within" if total["within"] else "NOT within"
    lines = [
        f"- Faithful {report['models']['rec'].removesuffix('_rec')} ({report['ours']} against "
        f"{report['reference']}, {len(report['pages'])} bench pages): CER {total['cer'] * 100:.2f}%"
        f" against {total['reference_cer'] * 100:.2f}%: {verdict} {MAX_CER_GAP * 100:.1f} points;"
        f" ours against its text {total['cer_vs_reference'] * 100:.2f}%"
    ]
    for label, row in report["pages"].items():
        same = "same text" if row["same_text"] else f"{row['cer_vs_reference'] * 100:.2f}% apart"
        lines.append(
            f"  - {label}: {row['cer'] * 100:.2f}% / {row['reference_cer'] * 100:.2f}%, {same}"
        )
    return lines


@register
class FaithfulV6(Scenario):
    """Our PP-OCRv6 small at f32 against PaddleOCR's processing of the same models."""

    name = "faithful-v6"
    help = "the default set's text at f32 against PaddleOCR's processing (RapidOCR or PaddleOCR)"
    shared = ("out", "pages", "threads")
    defaults: ClassVar[dict[str, Any]] = {"pages": 8}

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """--backend and --reference."""
        parser.add_argument("--backend", choices=("openvino", "onnxruntime"), default="openvino")
        parser.add_argument("--reference", choices=sorted(REFERENCES), default="rapidocr")

    def run(self, args: argparse.Namespace) -> Results:
        """The comparison; failed where the CERs are further apart than `MAX_CER_GAP`."""
        report = measure(args.pages, args.threads or 2, args.backend, args.reference)
        return Results(
            data=report,
            markdown="\n".join(markdown_lines(report)) + "\n",
            failed=not report["total"]["within"],
        )
