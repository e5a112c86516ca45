"""The torch engine compiled as `compile = "auto"` compiles on a GPU (issue 40), proven on the
CPU with Inductor's C++ code generation on two tiny synthetic models in the OCR models' shape
(`tests.tiny_onnx`, converted by the engine's real path: onnx2torch and `host_shapes`), so that
it takes seconds, not the minutes a real model takes here:

- the compiled graphs, batch axis dynamic, answer what eager answers within 1e-4 at every bucket
  of a small bucket set (and at the detector's dynamic height and width);
- after the warm-up, a run of mixed batch sizes, widths and page sizes compiles nothing more
  (Dynamo's counters), where a static compile recompiled on each new batch size;
- a warm-up past its budget falls back to eager and says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from models.engine_options import EngineOptions
from models.spec import ModelSpec
from models.torch_options import TorchOptions, bucket_shape

torch = pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")
pytest.importorskip("onnx")

from torch._dynamo.utils import counters  # noqa: E402

from models.torch_backend import TorchPredictor  # noqa: E402
from models.torch_compile import warmup_shapes  # noqa: E402
from tests.tiny_onnx import tiny_specs  # noqa: E402

MAX_ROWS = {"rec": 4, "det": 2}
"""Batch buckets warmed: rec 1, 2 and 4 rows; det 1 and 2 pages."""


def _options(tmp: Path, compile_mode: str = "default", **fields: object) -> EngineOptions:
    torch_options = TorchOptions(
        compile=compile_mode,  # type: ignore[arg-type]
        shapes="buckets",
        rec_widths_px=(64, 128),
        det_step_px=64,
        cache_dir=str(tmp / "inductor"),
        **fields,  # type: ignore[arg-type]
    )
    return EngineOptions(
        device="cpu", cpu_threads=1, torch=torch_options, max_batch_rows=tuple(MAX_ROWS.items())
    )


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelSpec]:
    return tiny_specs(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def predictors(
    specs: dict[str, ModelSpec], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, dict[str, TorchPredictor]]]:
    """{"compiled" | "eager": {kind: predictor}}, the compiled ones warmed up."""
    tmp = tmp_path_factory.mktemp("compile")
    torch._dynamo.reset()
    made: dict[str, dict[str, TorchPredictor]] = {"compiled": {}, "eager": {}}
    for mode, compile_mode in (("compiled", "default"), ("eager", "off")):
        for kind, spec in specs.items():
            predictor = TorchPredictor(spec, _options(tmp, compile_mode))
            predictor.load()
            predictor.warmup()
            made[mode][kind] = predictor
    yield made
    for by_kind in made.values():
        for predictor in by_kind.values():
            predictor.close()


def _input(shape: tuple[int, ...], seed: int) -> object:
    x = np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)
    return torch.from_numpy(x)


def test_the_warmup_compiled_every_bucket(predictors: dict[str, dict[str, TorchPredictor]]) -> None:
    for predictor in predictors["compiled"].values():
        state = predictor.compile_state
        assert predictor.compiled, state
        assert (state.mode, state.graphs) == ("default", len(_warmed(predictor))), state
        assert state.warmup_s > 0
    assert not predictors["eager"]["rec"].compiled


def _warmed(predictor: TorchPredictor) -> list[tuple[int, ...]]:
    spec = predictor.spec
    small = (1, 3, 48, 32) if spec.kind == "rec" else (1, 3, 64, 64)
    return warmup_shapes(spec, predictor.options.torch, max_rows=MAX_ROWS[spec.kind], small=small)


@pytest.mark.parametrize("kind", ["rec", "det"])
def test_compiled_answers_what_eager_answers_at_every_bucket(
    predictors: dict[str, dict[str, TorchPredictor]], kind: str
) -> None:
    compiled = predictors["compiled"][kind]
    eager = predictors["eager"][kind]
    shapes = _warmed(compiled)
    # Short of each bucket too (rows, and width or height and width), so the padding runs.
    shapes += [(max(1, n - 1), c, h - (8 if kind == "det" else 0), w - 8) for n, c, h, w in shapes]
    for seed, shape in enumerate(shapes):
        x = _input(shape, seed)
        got = compiled.forward(x)
        want = eager.forward(x)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4, msg=f"{kind} at {shape}")


def test_mixed_batches_after_the_warmup_compile_nothing(
    predictors: dict[str, dict[str, TorchPredictor]],
) -> None:
    """Serving never compiles: Dynamo's count of graphs and of frames it compiled stays as the
    warm-up left it over 40 batches of every size, width and page size the buckets serve."""
    before = dict(counters["stats"])
    assert before.get("unique_graphs", 0) >= 4  # rec: 1 and more rows at 2 widths; det
    rng = np.random.default_rng(3)
    options = predictors["compiled"]["rec"].options.torch
    ran = set()
    for i in range(40):
        if i % 2:
            shape = (int(rng.integers(1, 5)), 3, 48, int(rng.integers(8, 129)))
            predictors["compiled"]["rec"].forward(_input(shape, i))
            ran.add(bucket_shape("rec", shape, options))
        else:
            h, w = (int(v) * 32 for v in rng.integers(1, 40, size=2))
            predictors["compiled"]["det"].forward(_input((int(rng.integers(1, 3)), 3, h, w), i))
    assert dict(counters["stats"]) == before
    assert len(ran) >= 5  # most rec buckets ran


def test_a_warmup_past_its_budget_serves_eagerly(
    specs: dict[str, ModelSpec], tmp_path: Path
) -> None:
    predictor = TorchPredictor(specs["rec"], _options(tmp_path, compile_budget_s=1e-6))
    predictor.load()
    assert predictor.compiled
    predictor.warmup()
    assert not predictor.compiled
    state = predictor.compile_state
    assert state.mode == "off"
    assert "compile_budget_s" in state.reason, state.reason
    y = predictor.forward(_input((2, 3, 48, 64), 0))
    assert tuple(y.shape[:1]) == (2,)


def test_auto_is_off_on_the_cpu(specs: dict[str, ModelSpec], tmp_path: Path) -> None:
    predictor = TorchPredictor(specs["rec"], _options(tmp_path, "auto"))
    predictor.load()
    assert not predictor.compiled
    assert predictor.compile_state.mode == "off"
    assert "eager on the CPU" in predictor.compile_state.reason
