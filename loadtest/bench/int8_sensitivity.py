"""Which quantised layers of an int8 recogniser cost text (issue 41): per-layer sensitivity.

NNCF's int8 model (`make convert-int8`, OpenVINO IR) quantises a layer by FakeQuantize nodes on
its inputs. Here each quantised layer (a Convolution, GroupConvolution or MatMul) is left in
float in turn, by bypassing the FakeQuantize nodes that feed it (its activations; a weight still
held in float behind a FakeQuantize too; weights NNCF stored as int8 stay int8, per channel),
and the bench's pages are read again. The detector (f32, or `--det int8` as `"int8"` serves it)
runs once per page, so each try reads only the recogniser's crops: seconds per layer. Printed:
f32 and int8 as served, then each layer's CER per language and merged words
(`loadtest.accuracy`) with it in float, ranked by the Chinese CER gained, then the top 1, 2, ...
layers in float together (`--layers "a,b;c"`: groups of layers instead, each group one try)::

    python -m loadtest.bench.int8_sensitivity --pages 8 --det int8 --top 8

The names are the layers' OpenVINO names, which are the ONNX conversion's node names, so they
can go into NNCF's `IgnoredScope(names=...)` (`models.quantize.RECIPES`).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.bench.precision_layouts import Layout, load, score, synthetic_pages
from loadtest.engine_limit import real_page_set
from models.onnx_predictor import import_engine
from models.openvino_backend import OpenVinoPredictor, _runner, compile_config
from models.quantize import int8_model
from serving.engine.local import LocalEngine

QUANTISED_TYPES = ("Convolution", "GroupConvolution", "MatMul")
"""The operations NNCF quantises in the recognisers (their inputs are FakeQuantize outputs)."""

Pages = dict[str, tuple[np.ndarray, str]]
Scores = dict[str, tuple[float, int]]


def quantised_inputs(model: Any) -> dict[str, list[tuple[Any, Any]]]:
    """Each quantised layer's name -> its (input, FakeQuantize) pairs: the FakeQuantize node
    feeding that input directly or through Transposes and Reshapes (the attention's keys, the
    neck's sequence back to an image)."""
    layers: dict[str, list[tuple[Any, Any]]] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() not in QUANTISED_TYPES:
            continue
        pairs = []
        for port in op.inputs():
            source = port.get_source_output().get_node()
            while source.get_type_name() in ("Transpose", "Reshape"):
                port, source = source.input(0), source.input_value(0).get_node()
            if source.get_type_name() == "FakeQuantize":
                pairs.append((port, source))
        if pairs:
            layers[op.get_friendly_name()] = pairs
    return layers


def in_float(model_file: Path, names: Iterable[str]) -> Any:
    """The int8 model in `model_file` with the layers `names` fed in float (their FakeQuantize
    nodes bypassed)."""
    ov = import_engine("openvino", "openvino")
    model = ov.Core().read_model(str(model_file))
    layers = quantised_inputs(model)
    for name in names:
        for port, fake_quantize in layers[name]:
            port.replace_source_output(fake_quantize.input_value(0))
    model.validate_nodes_and_infer_types()
    return model


def memoised(run: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """`run`, its output kept per input's bytes (the f32 detector: the same pages every try)."""
    seen: dict[bytes, np.ndarray] = {}

    def cached(batch: np.ndarray) -> np.ndarray:
        key = hashlib.sha1(batch.tobytes()).digest() + repr(batch.shape).encode()
        if key not in seen:
            seen[key] = run(batch)
        return seen[key]

    return cached


class RecogniserTries:
    """The pages read with the detector at `det` (run once per page) and a recogniser swapped
    per try."""

    def __init__(
        self, pages: Pages, threads: int, det: str = "f32", int8_file: Path | None = None
    ) -> None:
        self.pages = pages
        self.engine: LocalEngine = load(Layout(det, "f32"), threads)
        for stage, predictor in self.engine.predictors.items():
            if stage != "rec" and isinstance(predictor, OpenVinoPredictor) and predictor._run:
                predictor._run = memoised(predictor._run)
        rec = self.engine.predictors["rec"]
        if not isinstance(rec, OpenVinoPredictor) or rec._run is None:
            raise TypeError("rec is not served by OpenVINO here")
        self.rec: OpenVinoPredictor = rec
        self.f32_run = rec._run
        self.int8_file = int8_file or int8_model(rec.spec, Path(rec.options.onnx_dir))

    def read(self, model: Any | None = None) -> Scores:
        """The pages' scores with `model` as the recogniser (None: f32)."""
        ov = import_engine("openvino", "openvino")
        run = self.f32_run
        if model is not None:
            config = compile_config(self.rec.options, "int8")
            run = _runner(ov.Core().compile_model(model, "CPU", config).create_infer_request())
        self.rec._run = run
        self.rec._alone = None
        texts = {
            name: "\n".join(line.text for line in self.engine.ocr(image).lines)
            for name, (image, _) in self.pages.items()
        }
        return score(self.pages, texts)


def row(label: str, scores: Scores, base: Scores | None = None) -> str:
    """One printed line: CER and merged words per language (and the CER change from `base`)."""
    text = f"{label:40}"
    for lang, (lang_cer, merged) in scores.items():
        delta = f" ({(lang_cer - base[lang][0]) * 100:+.2f})" if base else ""
        text += f" | {lang} {lang_cer * 100:.2f}%{delta} m{merged}"
    return text


def gained(scores: Scores) -> tuple[float, float, int]:
    """A try's rank: the Chinese CER, then the English, then all merged words (least first)."""
    return scores["zh"][0], scores["en"][0], sum(merged for _, merged in scores.values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=8, help="the bench's real pages")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--det", default="f32", help="the detector's precision: f32 or int8")
    parser.add_argument(
        "--model", type=Path, help="the int8 recogniser (default: the recipe's, made already)"
    )
    parser.add_argument("--top", type=int, default=8, help="cumulative tries of the top layers")
    parser.add_argument(
        "--layers", help='groups of layers to try, "a,b;c": a and b together, then c'
    )
    args = parser.parse_args(argv)
    pages = {label: (image, truth) for label, image, truth in real_page_set(args.pages)}
    pages.update(synthetic_pages())
    tries = RecogniserTries(pages, args.threads, args.det, args.model)
    f32 = tries.read()
    print(row("f32", f32), flush=True)
    int8 = tries.read(in_float(tries.int8_file, []))
    print(row("int8", int8, f32), flush=True)
    ov = import_engine("openvino", "openvino")
    names = list(quantised_inputs(ov.Core().read_model(str(tries.int8_file))))
    if args.layers:  # groups of layers, each group one try
        groups = [group.split(",") for group in args.layers.split(";")]
    else:
        print(row("int8, every layer in float", tries.read(in_float(tries.int8_file, names)), f32))
        groups = [[name] for name in names]
    alone = {}
    for group in groups:
        label = ",".join(group)
        alone[label] = tries.read(in_float(tries.int8_file, group))
        print(row(f"{label} in float", alone[label], int8), flush=True)
    ranked = sorted(groups, key=lambda group: gained(alone[",".join(group)]))
    print("ranked (CER of zh then en with it in float):", ";".join(",".join(g) for g in ranked))
    for top in range(1, min(args.top, len(ranked)) + 1):
        floated = [name for group in ranked[:top] for name in group]
        scores = tries.read(in_float(tries.int8_file, floated))
        print(row(f"top {top} in float", scores, f32), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
