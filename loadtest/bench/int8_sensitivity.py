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

    ocr-bench int8-layers --pages 8 --det int8 --top 8

The names are the layers' OpenVINO names, which are the ONNX conversion's node names, so they
can go into NNCF's `IgnoredScope(names=...)` (`models.quantize.RECIPES`).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.bench.options import count
from loadtest.bench.precision_layouts import Layout, load, score, synthetic_pages
from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.engine_limit import real_page_set
from models.onnx_predictor import import_engine
from models.openvino_backend import OpenVinoPredictor, compile_runner
from models.openvino_layout import with_argmax
from models.quantize import int8_model
from serving.cpus import available_cpus
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
            if stage != "rec" and isinstance(predictor, OpenVinoPredictor):
                predictor.replace_runner(memoised)
        rec = self.engine.predictors["rec"]
        if not isinstance(rec, OpenVinoPredictor):
            raise TypeError("rec is not served by OpenVINO here")
        self.rec: OpenVinoPredictor = rec
        self.f32_run = rec.replace_runner(lambda run: run)
        self.int8_file = int8_file or int8_model(rec.spec, Path(rec.options.onnx_dir))

    def read(self, model: Any | None = None) -> Scores:
        """The pages' scores with `model` as the recogniser (None: f32)."""
        run = self.f32_run
        if model is not None:
            if self.rec.argmax_in_graph:  # as the served recogniser answers (argmax pairs)
                model = with_argmax(import_engine("openvino", "openvino"), model)
            run = compile_runner(model, self.rec.options, "int8")
        self.rec.replace_runner(lambda _: run)
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
    zh, en = scores.get("zh", (0.0, 0))[0], scores.get("en", (0.0, 0))[0]  # where pages had them
    return zh, en, sum(merged for _, merged in scores.values())


@register
class Int8Layers(Scenario):
    """Each quantised layer of the int8 recogniser left in float in turn: which cost text."""

    name = "int8-layers"
    help = "which layers of the int8 recogniser cost text: each left in float in turn"
    shared = ("out", "pages", "threads")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Its own options."""
        parser.add_argument("--det", default="f32", help="the detector's precision: f32 or int8")
        parser.add_argument(
            "--model", type=Path, help="the int8 recogniser (default: the recipe's, made already)"
        )
        parser.add_argument(
            "--top", type=count(0), default=8, help="cumulative tries of the top layers"
        )
        parser.add_argument(
            "--layers", help='groups of layers to try, "a,b;c": a and b together, then c'
        )

    def run(self, args: argparse.Namespace) -> Results:
        """f32, int8, each layer (or group) in float, then the top ones together."""
        pages = {label: (image, truth) for label, image, truth in real_page_set(args.pages)}
        pages.update(synthetic_pages())
        tries = RecogniserTries(pages, args.threads or available_cpus(), args.det, args.model)
        rows: dict[str, Scores] = {}
        lines: list[str] = []

        def tried(label: str, scores: Scores, base: Scores | None) -> Scores:
            rows[label] = scores
            lines.append("- " + row(label, scores, base))
            print(lines[-1], file=sys.stderr)
            return scores

        f32 = tried("f32", tries.read(), None)
        int8 = tried("int8", tries.read(in_float(tries.int8_file, [])), f32)
        ov = import_engine("openvino", "openvino")
        names = list(quantised_inputs(ov.Core().read_model(str(tries.int8_file))))
        if args.layers:  # groups of layers, each group one try
            groups = [group.split(",") for group in args.layers.split(";")]
            unknown = sorted({name for group in groups for name in group} - set(names))
            if unknown:  # kept in float by the recipe already, or a typo
                raise SystemExit(
                    f"not quantised in {tries.int8_file}: {', '.join(unknown)}; its quantised "
                    f"layers: {', '.join(names)}"
                )
        else:
            every = tries.read(in_float(tries.int8_file, names))
            tried("int8, every layer in float", every, f32)
            groups = [[name] for name in names]
        alone = {}
        for group in groups:
            label = ",".join(group)
            alone[label] = tried(
                f"{label} in float", tries.read(in_float(tries.int8_file, group)), int8
            )
        ranked = sorted(groups, key=lambda group: gained(alone[",".join(group)]))
        lines.append(
            "- ranked (CER of zh then en with it in float): "
            + ";".join(",".join(g) for g in ranked)
        )
        for top in range(1, min(args.top, len(ranked)) + 1):
            floated = [name for group in ranked[:top] for name in group]
            tried(f"top {top} in float", tries.read(in_float(tries.int8_file, floated)), f32)
        data = {
            "int8_file": str(tries.int8_file),
            "ranked": [",".join(g) for g in ranked],
            "tries": {
                label: {lang: {"cer": c, "merged_words": m} for lang, (c, m) in scores.items()}
                for label, scores in rows.items()
            },
        }
        zh = {label: scores["zh"][0] * 100 for label, scores in rows.items() if "zh" in scores}
        return Results(
            data=data,
            markdown="\n".join(lines) + "\n",
            plots={"zh_cer": bars("Chinese CER per try", "CER %", zh)} if zh else {},
        )
