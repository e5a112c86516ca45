"""The torch engine's forwards never read a device value on the host (issue 27), proven on the
CPU: every read of a tensor's value by Python (`.item`, `.tolist`, `.cpu`, `.numpy`, `bool`,
`int`, `float`, `__index__`) passes through `__torch_function__`, so a `TorchFunctionMode`
counts them; on a GPU each would wait for all the work queued before it. The det and rec
forwards make none, at exact shapes and at every bucket of a small bucket set, where the
converted graph as onnx2torch makes it reads dozens; so does `launch` with uint8 pixels, the
server's path (copy in, normalisation on the device, forward, the detector's map quantised to
bytes, copy out). Both models compile whole
(`torch.compile(fullgraph=True)`) and the compiled forward answers what the eager one does.
That the exact mode still reads Paddle's texts is `test_torch_engine.py`."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models import convert
from models.bundle import load_bundle
from models.engine_options import EngineOptions
from models.spec import ModelSpec
from models.torch_options import TorchOptions, bucket_shape, rec_buckets
from pipelines.types import DetParams
from serving.config import EngineConfig
from tests.conftest import ONE_SET

torch = pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")

from torch.overrides import TorchFunctionMode  # noqa: E402

from models.torch_backend import TorchPredictor, import_onnx2torch  # noqa: E402
from models.torch_graph import host_shapes  # noqa: E402

HOST_READS = frozenset(
    {"item", "tolist", "cpu", "numpy", "__bool__", "__index__", "__int__", "__float__"}
)

BUCKETS = TorchOptions(shapes="buckets", rec_widths_px=(320, 480), det_step_px=128)
"""A small bucket set, so that every bucket runs within the test's time."""


class HostReads(TorchFunctionMode):
    """Counts the torch calls that read a tensor's value on the host, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def specs() -> dict[str, ModelSpec]:
    """PP-OCRv5 mobile's ONNX conversions in the configured cache (`make convert`): the graph
    as onnx2torch converts it, which PP-OCRv6 small's ONNX (`SAME_UPPER` padding) is not without
    the engine's rewrites (`models.onnx_rewrites`)."""
    cache = Path(EngineConfig().onnx_dir)
    bundle = load_bundle(ONE_SET.det, ONE_SET.rec)
    found = {spec.kind: convert.find_onnx(spec, cache) for spec in (bundle.det, bundle.rec)}
    if any(spec is None for spec in found.values()):
        pytest.skip(f"no ONNX conversions in {cache}: run {convert.CONVERT_COMMAND}")
    return {kind: spec for kind, spec in found.items() if spec is not None}


def _predictor(spec: ModelSpec, options: TorchOptions) -> TorchPredictor:
    predictor = TorchPredictor(spec, EngineOptions(device="cpu", cpu_threads=2, torch=options))
    predictor.load()
    if spec.kind == "rec":
        predictor.output_argmax()  # as the server asks
    else:
        predictor.output_byte_map(DetParams().thresh)  # quantised on the device, as served
    return predictor


@pytest.fixture(scope="module")
def predictors(specs: dict[str, ModelSpec]) -> Iterator[dict[str, dict[str, TorchPredictor]]]:
    made = {
        mode: {kind: _predictor(spec, options) for kind, spec in specs.items()}
        for mode, options in (("exact", TorchOptions()), ("buckets", BUCKETS))
    }
    yield made
    for by_kind in made.values():
        for predictor in by_kind.values():
            predictor.close()


def _shapes(kind: str) -> list[tuple[int, int, int, int]]:
    """Input shapes that land in every bucket of `BUCKETS` (rec: each width and batch bucket up
    to 4 rows; det: three height x width buckets), most of them short of it, so that the
    padding runs too."""
    if kind == "det":
        return [(1, 3, 96, 96), (2, 3, 224, 160), (3, 3, 128, 288)]  # multiples of 32
    shapes = []
    for rows, _, height, width in rec_buckets(BUCKETS, height=48, max_batch=4):
        shapes.append((rows if rows <= 2 else rows - 1, 3, height, width - 24))
    return shapes


def _reads(predictor: TorchPredictor, shape: tuple[int, ...]) -> tuple[dict[str, int], Any]:
    x = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32))
    with HostReads() as reads:
        y = predictor.forward(x)
    return dict(reads.counts), y


@pytest.mark.parametrize("mode", ["exact", "buckets"])
@pytest.mark.parametrize("kind", ["det", "rec"])
def test_forwards_read_nothing_from_the_device(
    predictors: dict[str, dict[str, TorchPredictor]], mode: str, kind: str
) -> None:
    predictor = predictors[mode][kind]
    assert predictor.host_reads_free
    options = BUCKETS if mode == "buckets" else TorchOptions()
    ran = set()
    for shape in _shapes(kind):
        counts, y = _reads(predictor, shape)
        assert counts == {}, f"{kind} at {shape} ({mode}) read the device: {counts}"
        assert y.shape[0] == shape[0], "the padded rows are cropped off"
        if kind == "det":
            assert tuple(y.shape[-2:]) == shape[-2:], "the maps are cropped to the input"
        ran.add(bucket_shape(kind, shape, options))
    if mode == "buckets":
        # Every bucket ran, and none at the input's own shape.
        assert not ran & set(_shapes(kind))
        if kind == "rec":
            assert ran == set(rec_buckets(BUCKETS, height=48, max_batch=4))


@pytest.mark.parametrize("mode", ["exact", "buckets"])
@pytest.mark.parametrize("kind", ["det", "rec"])
def test_launch_with_uint8_pixels_reads_nothing_from_the_device(
    predictors: dict[str, dict[str, TorchPredictor]], mode: str, kind: str
) -> None:
    """The server's path (issue 40): uint8 pixels collated into a slot (`stage_pixels`), some
    rows shorter than the batch (`sizes`: zeroed on the device), launched: the copy in, the
    lookup-table normalisation, the forward and the copy out read nothing back (on the CPU lane
    the copy out was a `.numpy()`)."""
    predictor = predictors[mode][kind]
    rng = np.random.default_rng(4)
    for shape in _shapes(kind):
        n, _, height, width = shape
        slot = predictor.stage_pixels(shape)
        slot.input[...] = rng.integers(0, 256, shape, dtype=np.uint8)
        slot.sizes = tuple((height - 8 * (i % 2), width - 16 * (i % 2)) for i in range(n))
        try:
            with HostReads() as reads:
                predictor.launch(slot)
            out = slot.result()
        finally:
            slot.release()
        assert dict(reads.counts) == {}, f"{kind} at {shape} ({mode}) read the device"
        assert out.shape[0] == n
        assert out.dtype == (np.uint8 if kind == "det" else np.float32)  # det: its byte map


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence:UserWarning")  # onnx2torch's Slice
def test_the_counter_sees_the_reads_of_the_graph_as_converted(specs: dict[str, ModelSpec]) -> None:
    """The control: onnx2torch's own modules read shapes back (dozens a forward), so a zero
    above is the rewrite's doing, not a blind counter."""
    onnx = pytest.importorskip("onnx")
    module = import_onnx2torch().convert(onnx.load(str(specs["rec"].onnx_file))).eval()
    x = torch.zeros((1, 3, 48, 320))
    with torch.inference_mode(), HostReads() as reads:
        module(x)
    assert sum(reads.counts.values()) >= 20, reads.counts


def test_bucket_rows_answer_what_exact_rows_answer(
    predictors: dict[str, dict[str, TorchPredictor]],
) -> None:
    """Padding a rec batch with zero rows (3 -> 4, width already a bucket's) leaves the real
    rows' answers as they are: rows do not mix."""
    x = torch.from_numpy(np.random.default_rng(1).uniform(-1, 1, (3, 3, 48, 320)))
    x = x.to(torch.float32)
    exact = predictors["exact"]["rec"].forward(x)
    padded = predictors["buckets"]["rec"].forward(x)
    assert padded.shape == exact.shape
    np.testing.assert_array_equal(padded[..., 0].numpy(), exact[..., 0].numpy())  # classes
    np.testing.assert_allclose(padded[..., 1].numpy(), exact[..., 1].numpy(), atol=1e-5)


@pytest.mark.parametrize(("kind", "shape"), [("det", (1, 3, 96, 128)), ("rec", (2, 3, 48, 320))])
def test_models_compile_whole_and_answer_as_eager(
    specs: dict[str, ModelSpec], kind: str, shape: tuple[int, ...]
) -> None:
    """`torch.compile(fullgraph=True)` traces each rewritten model without a graph break (a
    break raises). The backend is AOTAutograd without code generation ("aot_eager"), about 10 s
    a model here; Inductor's CPU code generation of the same graphs took 3 and 2 minutes on two
    busy cores, matching eager within 4e-6 (tests/gpu runs it on a GPU)."""
    onnx = pytest.importorskip("onnx")
    module = import_onnx2torch().convert(onnx.load(str(specs[kind].onnx_file))).eval()
    module = host_shapes(module)
    x = torch.from_numpy(np.random.default_rng(2).uniform(-1, 1, shape).astype(np.float32))
    torch._dynamo.reset()
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager", dynamic=False)
    with torch.inference_mode():
        eager = module(x)
        got = compiled(x)
    eager = eager[0] if isinstance(eager, list | tuple) else eager
    got = got[0] if isinstance(got, list | tuple) else got
    torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-5)


def test_exact_mode_is_the_default_on_the_cpu() -> None:
    """Paddle's texts (test_torch_engine.py) come from the CPU's default: each batch at its own
    shape, eager ("auto" on the CPU)."""
    options = EngineOptions().torch.resolved(buckets=False)
    assert (options.compile_mode(gpu=False), options.shapes) == ("off", "exact")
