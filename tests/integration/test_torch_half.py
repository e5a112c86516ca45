"""Half precision on the CPU, the stand-in for a GPU's fp16 (issue 40): the torch engine at
`engine.precision = "fp16"` runs its forwards under `torch.autocast(dtype=torch.float16)` on the
CPU as on a GPU, and its texts of the synthetic test pages are held, per language, within 0.1 CER
points of the same engine at fp32 (whose texts are Paddle's: `test_torch_engine.py`), with no
more merged words (`loadtest.accuracy.merged_words`) against the pages' own text. This is what
lets `engine.precision = "auto"` run fp16 on a GPU (`models.torch_precision`).

Measured here (two busy cores, Xeon with AVX512-FP16 and AMX, torch 2.13, 2026-12-06): the
detector and the recogniser both at fp16 read every page exactly as fp32 (0.00 points per
language, 0 merged words as fp32); the recogniser alone at fp16 changed one character of the
dense page ("7oo9" -> "7o09", 0.035 points). Reading the three pages took 79 s to fp32's 64 s:
fp16 is slower on this CPU, so "auto" keeps the CPU at fp32.

bf16 (8 mantissa bits to fp16's 11) is a CPU precision choice, measured as what it is: the
detector at bf16 passes (0.04 points on the dense page, none elsewhere); the recogniser at bf16
does not (0.29 points on the dense page, 0.69 with both; it drops spaces: "Invoice2024-0137").
Its convolutions cause it, spread over the backbone: the head (last MatMul), every MatMul,
LayerNorm's pow/sqrt/mean and the softmax kept in fp32 changed nothing; the convolutions in fp32
gave fp32's text.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from loadtest.accuracy import merged_words, pages_cer
from models.engine_options import Precision
from serving.config import AppConfig, EngineConfig, PaddlexConfig, WorkersConfig
from serving.engine.local import LocalEngine
from tests import images
from tests.conftest import ONE_SET

torch = pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")

CER_BOUND = 0.001
"""0.1 CER points: the bound bucketed batching is held to (`loadtest.bench.batching`)."""

LANGUAGES = {"latin": ("latin", "dense", "dense-top"), "chinese": ("chinese",)}

DENSE_TOP_LINES = 10
"""fp16 reads the dense page's first 10 lines (its two headings, the first one's seven body lines
and the second one's first, the page's full width), cropped below them: the CPU emulates fp16, at
five times fp32's time (80 CPU seconds for the whole dense page here), and the bound is the same
per language on the lines it reads. 16 lines until 2026-12-07, cut for the suite's time."""


@pytest.fixture(scope="module")
def pages() -> dict[str, images.TextImage]:
    return {
        "latin": images.latin_lines(),
        "chinese": images.chinese_lines(),
        "dense": images.dense_page(),
        "dense-top": images.dense_page_top(DENSE_TOP_LINES),
    }


def _engine(onnx_dir: str, precision: Precision) -> LocalEngine:
    engine_config = dataclasses.replace(
        EngineConfig(), cpu_backend="torch", cpu_threads=2, onnx_dir=onnx_dir, precision=precision
    )
    engine = LocalEngine(
        AppConfig(
            models=ONE_SET,
            engine=engine_config,
            workers=dataclasses.replace(WorkersConfig(), cpu_workers=2, devices=("cpu",)),
            paddlex=PaddlexConfig(visualize=False),
        )
    )
    engine.load()
    ran_at = {p.options.precision for p in engine.predictors.values()}  # type: ignore[attr-defined]
    assert ran_at == {precision}
    return engine


def _read(engine: LocalEngine, pages: dict[str, images.TextImage]) -> dict[str, list[str]]:
    return {name: [ln.text for ln in engine.ocr(page.image).lines] for name, page in pages.items()}


@pytest.fixture(scope="module")
def fp32_texts(onnx_dir: str, pages: dict[str, images.TextImage]) -> dict[str, list[str]]:
    return _read(_engine(onnx_dir, "fp32"), pages)


def _cers(fp32: dict[str, list[str]], got: dict[str, list[str]]) -> dict[str, float]:
    return {
        language: pages_cer({n: "\n".join(fp32[n]) for n in names if n in got}, got)
        for language, names in LANGUAGES.items()
    }


def _merged(pages: dict[str, images.TextImage], got: dict[str, list[str]]) -> dict[str, int]:
    """Merged words per language against the pages' own text, on the pages `got` read."""
    return {
        language: sum(
            merged_words("\n".join(pages[n].lines), "\n".join(got[n])) for n in names if n in got
        )
        for language, names in LANGUAGES.items()
    }


def _conv_dtypes(engine: LocalEngine) -> set[Any]:
    """Records the output dtypes of each model's convolutions while the engine reads."""
    ran: set[Any] = set()
    for predictor in engine.predictors.values():
        for module in predictor._eager.modules():  # type: ignore[attr-defined]
            if isinstance(module, torch.nn.Conv2d):
                module.register_forward_hook(lambda _m, _i, out: ran.add(out.dtype))
    return ran


def test_fp16_on_the_cpu_reads_within_a_tenth_of_a_cer_point_of_fp32_per_language(
    onnx_dir: str, pages: dict[str, images.TextImage], fp32_texts: dict[str, list[str]]
) -> None:
    engine = _engine(onnx_dir, "fp16")
    ran = _conv_dtypes(engine)
    texts = _read(engine, {n: page for n, page in pages.items() if n != "dense"})  # dense-top
    assert ran == {torch.float16}  # autocast ran the convolutions in half precision
    assert len(texts["dense-top"]) == DENSE_TOP_LINES
    cers = _cers(fp32_texts, texts)
    assert all(cer <= CER_BOUND for cer in cers.values()), (cers, texts, fp32_texts)
    fp32_read = {n: fp32_texts[n] for n in texts}
    merged, merged_fp32 = _merged(pages, texts), _merged(pages, fp32_read)
    assert all(merged[lang] <= merged_fp32[lang] for lang in LANGUAGES), (merged, merged_fp32)


def test_the_detector_at_bf16_reads_within_a_tenth_of_a_cer_point_of_fp32(
    onnx_dir: str, pages: dict[str, images.TextImage], fp32_texts: dict[str, list[str]]
) -> None:
    engine = _engine(onnx_dir, "bf16")
    rec = engine.predictors["rec"]
    # The recogniser back at fp32 (its bf16 is the test below), a test's reach into the predictor.
    rec._options = dataclasses.replace(rec.options, precision="fp32")  # type: ignore[attr-defined]
    whole = {n: page for n, page in pages.items() if n != "dense-top"}
    cers = _cers(fp32_texts, _read(engine, whole))
    assert all(cer <= CER_BOUND for cer in cers.values()), cers


@pytest.mark.xfail(
    strict=True, reason="measured: the recogniser's convolutions at bf16 drop spaces (module doc)"
)
def test_the_recogniser_at_bf16_reads_within_a_tenth_of_a_cer_point_of_fp32(
    onnx_dir: str, pages: dict[str, images.TextImage], fp32_texts: dict[str, list[str]]
) -> None:
    engine = _engine(onnx_dir, "bf16")
    det = engine.predictors["det"]
    det._options = dataclasses.replace(det.options, precision="fp32")  # type: ignore[attr-defined]
    dense = {"dense": pages["dense"]}  # where it shows; the other pages take a minute more
    cers = _cers(fp32_texts, _read(engine, dense))
    assert all(cer <= CER_BOUND for cer in cers.values()), cers
