"""bf16 autocast, the CPU's stand-in for a GPU's fp16 (issue 40): the torch engine at
`engine.precision = "bf16"` runs its forwards under `torch.autocast(dtype=torch.bfloat16)`, and
its texts of the synthetic test pages are held, per language, within 0.1 CER points of the same
engine at fp32 (whose texts are Paddle's: `test_torch_engine.py`).

Measured here (two busy cores, 2026-12-06): the detector at bf16 passes (0.04 points on the
dense page, none elsewhere); the recogniser at bf16 does not (0.29 points on the dense page, 0.69
with both; it drops spaces: "Invoice2024-0137"). Its convolutions cause it, spread over the
backbone: the head (last MatMul), every MatMul, LayerNorm's pow/sqrt/mean and the softmax kept in
fp32 changed nothing; the convolutions in fp32 gave fp32's text. CPU autocast keeps more ops
in bf16 than CUDA's keeps in fp16, and bf16 has 8 mantissa bits to fp16's 11, so this bounds a
GPU's fp16 from above, not a measure of it; a GPU stays at fp32 until its run says otherwise.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from loadtest.accuracy import pages_cer
from serving.config import AppConfig, EngineConfig, PaddlexConfig, WorkersConfig
from serving.engine.local import LocalEngine
from tests import images
from tests.conftest import ONE_SET

pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")

CER_BOUND = 0.001
"""0.1 CER points: the bound bucketed batching is held to (`loadtest.bench.batching`)."""

LANGUAGES = {"latin": ("latin", "dense"), "chinese": ("chinese",)}


@pytest.fixture(scope="module")
def pages() -> dict[str, np.ndarray]:
    return {
        "latin": images.latin_lines().image,
        "chinese": images.chinese_lines().image,
        "dense": images.dense_page().image,
    }


def _engine(onnx_dir: str, precision: str) -> LocalEngine:
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
    assert {p.options.precision for p in engine.predictors.values()} == {precision}
    return engine


def _read(engine: LocalEngine, pages: dict[str, np.ndarray]) -> dict[str, list[str]]:
    return {name: [ln.text for ln in engine.ocr(image).lines] for name, image in pages.items()}


@pytest.fixture(scope="module")
def fp32_texts(onnx_dir: str, pages: dict[str, np.ndarray]) -> dict[str, list[str]]:
    return _read(_engine(onnx_dir, "fp32"), pages)


def _cers(fp32: dict[str, list[str]], got: dict[str, list[str]]) -> dict[str, float]:
    return {
        language: pages_cer({n: "\n".join(fp32[n]) for n in names if n in got}, got)
        for language, names in LANGUAGES.items()
    }


def test_the_detector_at_bf16_reads_within_a_tenth_of_a_cer_point_of_fp32(
    onnx_dir: str, pages: dict[str, np.ndarray], fp32_texts: dict[str, list[str]]
) -> None:
    engine = _engine(onnx_dir, "bf16")
    rec = engine.predictors["rec"]
    # The recogniser back at fp32 (its bf16 is the test below), a test's reach into the predictor.
    rec._options = dataclasses.replace(rec.options, precision="fp32")  # type: ignore[attr-defined]
    cers = _cers(fp32_texts, _read(engine, pages))
    assert all(cer <= CER_BOUND for cer in cers.values()), cers


@pytest.mark.xfail(
    strict=True, reason="measured: the recogniser's convolutions at bf16 drop spaces (module doc)"
)
def test_the_recogniser_at_bf16_reads_within_a_tenth_of_a_cer_point_of_fp32(
    onnx_dir: str, pages: dict[str, np.ndarray], fp32_texts: dict[str, list[str]]
) -> None:
    engine = _engine(onnx_dir, "bf16")
    det = engine.predictors["det"]
    det._options = dataclasses.replace(det.options, precision="fp32")  # type: ignore[attr-defined]
    dense = {"dense": pages["dense"]}  # where it shows; the other pages take a minute more
    cers = _cers(fp32_texts, _read(engine, dense))
    assert all(cer <= CER_BOUND for cer in cers.values()), cers
