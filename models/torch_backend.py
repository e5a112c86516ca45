"""PyTorch as an engine backend: the ONNX conversion of a Paddle model, as a torch module.

At `load()` the cached ONNX conversion (`models.convert`, made ahead by `make convert`) becomes
a torch module with `onnx2torch` (about 0.2 s), whose shape arithmetic `models.torch_graph`
then moves to the host (0.3-0.6 s): a forward never reads a device value back, so on a GPU
`launch` returns as soon as the work is queued (issue 27). It runs under
`torch.inference_mode()`, compiled on a GPU by default (`[engine.torch] compile = "auto"`,
`torch.compile(fullgraph=True)` with a dynamic batch axis and every served shape compiled at
warm-up: `models.torch_compile`) and eagerly on the CPU or where compiling fails, at each
batch's own shape or
padded up to shape buckets (`[engine.torch] shapes`, `models.torch_options`). On `gpu:N` it
runs on CUDA with the worker's `models.staging.Lane`: batches are collated straight into
page-locked slots, copied with `non_blocking=True` on the lane's upload stream, computed on its
compute stream, copied back once on its download stream, and several batches may be in flight.
On "cpu" the same code runs synchronously (so CI proves the conversion without a GPU). Batches
arrive as uint8 pixels (`stage_pixels`: a quarter of float32's page-locked bytes and copy) and
are normalised on the device by a gather from `pipelines.pixels.lookup_table`, which gives the
host's float32 values bit for bit (`normalize_pixels`). A
recogniser answers with each step's best class and its probability, computed on the device
(`output_argmax`, which the server asks for), not with every class's probability, and a
detector with its map quantised to bytes on the device (`output_byte_map`: a quarter of the float
map's bytes, exact at the threshold, `pipelines.det_byte_map`), which device workers ask for.

Numerics: the precision of the options (`models.torch_precision`: `engine.precision = "auto"`
is fp16 on a GPU, fp32 on the CPU), with TF32 off (`engine.allow_tf32`). fp16 runs the forward
under `torch.autocast` (float16): convolutions and matmuls in half precision, softmax, and the
recogniser's LayerNorm variance (`pow`, `sqrt`, `div`), in fp32, as autocast keeps them; "bf16"
the same in bfloat16. Both run on the CPU too, where fp16 stands in for a GPU's in `make test`
(tests/integration/test_torch_half.py: PP-OCRv5 mobile reads the test pages as at fp32).
(Casting the whole module with `.half()` changed 1 character in 12 lines on PP-OCRv5 mobile;
autocast is not measured on a GPU yet.)
Installed by the `torch` extra (`pip install -e '.[torch]'`); PyPI's torch is the CUDA build.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import time
import types
from typing import Any

import numpy as np

from models.base import EngineBackend, EngineBackendError, Predictor, PredictorError, not_loaded
from models.convert import prepare_onnx
from models.engine_options import EngineOptions
from models.lane_predictor import LanePredictor
from models.onnx_rewrites import SamePadding, check_same_pads, for_onnx2torch
from models.paddle_predictor import warmup_shape
from models.spec import ModelSpec
from models.staging import Lane, Slot, lane_slots
from models.torch_compile import (
    CompileState,
    compile_module,
    compiled_shape,
    mark_dynamic,
    warm_up,
    warmup_shapes,
)
from models.torch_graph import UnsupportedGraph, host_shapes
from models.torch_options import bucket_shape
from pipelines.det_byte_map import BYTE_MAP_SCALE, byte_map_level
from pipelines.pixels import lookup_table

logger = logging.getLogger(__name__)


def import_torch() -> Any:
    """torch, or a PredictorError that says how to install it."""
    try:
        return importlib.import_module("torch")
    except ImportError as err:
        raise PredictorError(
            "the torch engine backend needs PyTorch: pip install -e '.[torch]' "
            f"(the torch extra; PyPI's torch is the CUDA build): {err}"
        ) from err


def import_onnx2torch() -> Any:
    """onnx2torch, importable where torchvision is not.

    onnx2torch imports torchvision at import time for two converters (NonMaxSuppression,
    RoiAlign) that OCR models do not use. Where torchvision is missing, or built for another
    torch (it then fails to import), a placeholder module stands in for it, so that a machine
    with torch alone can serve; converting a model that does use those operators then fails
    when the placeholder is called.
    """
    try:
        return importlib.import_module("onnx2torch")
    except (ImportError, RuntimeError) as err:
        if "torchvision" not in str(err) and "torchvision" not in repr(err.__cause__):
            raise PredictorError(f"cannot import onnx2torch: {err}") from err
        logger.warning("torchvision unusable (%s); onnx2torch runs without it", err)
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    for name in [m for m in sys.modules if m.startswith("onnx2torch")]:
        del sys.modules[name]
    placeholder = types.ModuleType("torchvision")
    ops = types.ModuleType("torchvision.ops")

    def unavailable(*_args: Any, **_kwargs: Any) -> Any:
        raise PredictorError("this model needs torchvision, which is not installed here")

    ops.roi_align = unavailable  # type: ignore[attr-defined]
    ops.nms = unavailable  # type: ignore[attr-defined]
    ops.box_convert = unavailable  # type: ignore[attr-defined]
    placeholder.ops = ops  # type: ignore[attr-defined]
    sys.modules["torchvision"] = placeholder
    sys.modules["torchvision.ops"] = ops
    return importlib.import_module("onnx2torch")


@functools.cache
def worker_lane(device: str, *, inflight_batches: int) -> Lane:
    """The lane of this process's `device`: one per device worker process (= instance), shared
    by its det/cls/rec predictors, with room for `inflight_batches` launched."""
    torch = import_torch()
    from models.torch_device import CpuOps, CudaOps

    ops = CudaOps(torch, device) if device.startswith("cuda") else CpuOps(torch)
    return Lane(ops, max_slots=lane_slots(inflight_batches))


def normalize_pixels(
    torch: Any, x: Any, table: Any, sizes: tuple[tuple[int, int], ...] = ()
) -> Any:
    """uint8 (n, 3, h, w) pixels on a device -> the float32 model input, where they are: each
    value read from `table` (`pipelines.pixels.lookup_table`, on the device) by channel and
    pixel, then 0.0 outside each row's (height, width) of `sizes` (empty: all pixels). Equal to
    `pipelines.pixels.normalize` bit for bit: a lookup rounds nothing."""
    channels = torch.arange(3, device=x.device).view(1, 3, 1, 1)
    out = table[channels, x.long()]
    for row, (height, width) in enumerate(sizes):
        out[row, :, height:, :] = 0.0
        out[row, :, :height, width:] = 0.0
    return out


def quantize_on_device(torch: Any, y: Any, thresh: float) -> Any:
    """(n, 1, H, W) float32 probability maps on a device -> their uint8 byte maps, where they
    are, as `pipelines.det_byte_map.quantize_map` computes them: `q > byte_map_level(thresh)`
    exactly where `y > float32(thresh)`. Reads nothing back (the bounds are Python numbers)."""
    level = byte_map_level(thresh)
    rounded = torch.round(y * float(BYTE_MAP_SCALE)).clamp_(0, BYTE_MAP_SCALE)
    # Against float32(thresh), as the host compares (`postprocess_det`): exact as a Python float,
    # so in float32 or float64 alike; a tensor made of it here would be a copy the host waits on.
    above = y > float(np.float32(thresh))
    return torch.where(above, rounded.clamp(min=level + 1), rounded.clamp(max=level)).to(
        torch.uint8
    )


class TorchPredictor(LanePredictor):
    """One converted model (the ONNX form of `spec`) on one device; see
    `models.lane_predictor.LanePredictor`."""

    def __init__(self, spec: ModelSpec, options: EngineOptions) -> None:
        if spec.onnx_file is None:
            raise PredictorError(f"{spec.directory} holds no ONNX model for the torch engine")
        super().__init__(spec, options)
        self._torch: Any = None
        self._module: Any = None
        self._eager: Any = None
        self.host_reads_free = False
        """Whether `models.torch_graph` kept every shape value on the host (set by `load`)."""
        self._table: Any = None
        self.compile_state = CompileState(mode="off", reason="not loaded")
        """What the model runs as (compiled or eager) and why; final after `warmup`."""
        self.byte_map_thresh: float | None = None
        """A detector's: the threshold its byte maps are exact at (`output_byte_map`); None:
        it answers the float map."""

    def output_byte_map(self, thresh: float) -> None:
        """A detector answers its map as bytes from now on, quantised on the device and exact at
        `thresh` (`models.base.ByteMapOutput`); other models are not maps, and answer as they
        did."""
        if self._spec.kind == "det":
            self.byte_map_thresh = float(thresh)

    @property
    def output_dtype(self) -> type[np.generic]:
        """uint8 for a detector's byte map, else float32."""
        return np.uint8 if self.byte_map_thresh is not None else np.float32

    @property
    def torch_device(self) -> str:
        """ "cuda:N" or "cpu"."""
        return f"cuda:{self._options.device_id}" if self._options.is_gpu else "cpu"

    def load(self) -> None:
        """Convert the ONNX graph to a torch module on the device; a second call does nothing."""
        if self._module is not None:
            return
        torch = import_torch()
        onnx2torch = import_onnx2torch()
        device = self.torch_device
        started = time.monotonic()
        try:
            if self._options.is_gpu:
                torch.backends.cuda.matmul.allow_tf32 = self._options.allow_tf32
                torch.backends.cudnn.allow_tf32 = self._options.allow_tf32
                torch.cuda.set_device(torch.device(device))
            else:
                torch.set_num_threads(self._options.cpu_threads)
            # The graph loaded here, not its path: given a path, onnx2torch writes a copy for
            # shape inference beside the model, which fails where models are read-only (the
            # container image under a read-only root filesystem).
            # Into the form onnx2torch converts: SAME padding written out (PP-OCRv6 small), weights
            # of Constant nodes as initializers (the text-line classifier): `models.onnx_rewrites`.
            graph = for_onnx2torch(importlib.import_module("onnx").load(str(self._spec.onnx_file)))
            module = self._host_shapes(onnx2torch.convert(graph).eval()).to(device)
        except Exception as err:  # onnx2torch and torch raise many kinds
            raise PredictorError(
                f"cannot load {self._spec.kind} model {self._spec.onnx_file} on {device}: {err}"
            ) from err
        self._torch = torch
        self._table = torch.from_numpy(lookup_table(self._spec.pixel_norm)).to(device)
        self._eager = module
        self._module = self._compiled(module)
        self._lane = worker_lane(device, inflight_batches=self._options.inflight_batches)
        logger.info(
            "loaded %s model=%s device=%s precision=%s (%s) tf32=%s host_reads_free=%s "
            "compile=%s shapes=%s in %.2fs (compile: %s)",
            self._spec.kind,
            self._spec.model_name,
            device,
            self._options.precision,
            self._options.precision_reason,
            self._options.allow_tf32,
            self.host_reads_free,
            self.compile_state.mode,
            self._options.torch.shapes,
            time.monotonic() - started,
            self.compile_state.reason,
        )

    def _host_shapes(self, module: Any) -> Any:
        """`module` with its shape arithmetic on the host, or as converted (every forward then
        waits on the device, and cannot be compiled whole) where the graph needs more."""
        try:
            rewritten = host_shapes(module)
        except UnsupportedGraph as err:
            logger.warning(
                "%s model %s keeps shape values on the device (its forwards wait on it): %s",
                self._spec.kind,
                self._spec.model_name,
                err,
            )
            return module
        self.host_reads_free = True
        return rewritten

    def _compiled(self, module: Any) -> Any:
        options = self._options.torch
        mode = options.compile_mode(gpu=self._options.is_gpu)
        setting = f"engine.torch.compile = {options.compile!r}"
        if mode == "off":
            why = " (eager on the CPU)" if options.compile == "auto" else ""
            self.compile_state = CompileState(mode="off", reason=setting + why)
            return module
        if not self.host_reads_free:  # a graph with device shape reads breaks `fullgraph`
            self.compile_state = CompileState(
                mode="off", reason=f"{setting}, but its shapes are read on the device: eager"
            )
            return module
        self.compile_state = CompileState(mode=mode, reason=setting)
        return compile_module(self._torch, module, mode, options.cache_dir)

    @property
    def compiled(self) -> bool:
        """Whether batches run through the compiled model (else eagerly)."""
        return self._module is not None and self._module is not self._eager

    def _forward(self, x: Any) -> Any:
        return self.forward(x)

    def stage_pixels(self, shape: tuple[int, ...]) -> Slot:
        """A page-locked slot to collate uint8 pixels (n, 3, h, w) into, with their `sizes`;
        `launch` normalises them on the device (`models.staging.PixelInput`)."""
        if len(shape) != 4:
            raise ValueError(f"expected an NCHW batch, got shape {shape}")
        return self._ready_lane().stage(shape, np.uint8)

    def launch(self, slot: Slot) -> None:
        """Issue the slot's copy in, the model (pixels normalised first, on the device) and the
        copy out; returns without waiting."""
        if slot.input.dtype != np.uint8:
            super().launch(slot)
            return
        lane = self._ready_lane()
        try:
            lane.launch(
                slot, functools.partial(self._forward_pixels, slot.sizes), self.output_dtype
            )
        except Exception as err:
            raise self._failed(slot.input.shape, err) from err

    def _forward_pixels(self, sizes: tuple[tuple[int, int], ...], x: Any) -> Any:
        with self._torch.inference_mode():
            x = normalize_pixels(self._torch, x, self._table, sizes)
        return self.forward(x)

    def forward(self, x: Any) -> Any:
        """The model on an NCHW float32 tensor on the device, run at its bucket's shape
        (`models.torch_options.bucket_shape`) and cropped back: its output, or the argmax pairs
        of its last axis (`output_argmax`), or a detector's byte map (`output_byte_map`). Reads
        nothing from the device (no host waits)."""
        torch = self._torch
        if self._module is None:
            raise not_loaded(self._spec)
        n, _, h, w = (int(d) for d in x.shape)
        bn, _, bh, bw = bucket_shape(self._spec.kind, tuple(x.shape), self._options.torch)
        precision = self._options.precision
        half = torch.bfloat16 if precision == "bf16" else torch.float16
        kind = self._spec.kind
        with (
            torch.inference_mode(),
            torch.autocast(device_type=x.device.type, dtype=half, enabled=precision != "fp32"),
        ):
            if (bn, bh, bw) != (n, h, w):
                x = torch.nn.functional.pad(x, (0, bw - w, 0, bh - h, 0, 0, 0, bn - n))
            module = self._module
            if self.compiled and compiled_shape(kind, (bn, 3, bh, bw), self._options.torch):
                if not x.is_inference():
                    # Dynamo guards on it: a graph compiled for the uint8 path's (and padding's)
                    # inference tensors would compile again for a float32 upload's tensor.
                    x = x.clone()
                mark_dynamic(torch, x, kind, self._options.torch)
            else:
                module = self._eager
            graphed = module is not self._eager and self.compile_state.mode == "reduce-overhead"
            if graphed:
                torch.compiler.cudagraph_mark_step_begin()
            y = module(x)
            if isinstance(y, list | tuple):
                y = y[0]
            if graphed:  # the next replay overwrites a CUDA graph's output; ours is in flight
                y = y.clone()
            y = y[:n]
            if self._spec.kind == "det" and (bh, bw) != (h, w):
                y = y[..., :h, :w]  # the detector's maps have the input's height and width
            y = y.float()
            if self._argmax:
                # Ties go to the first index, as numpy's argmax (torch documents the same).
                values, indices = torch.max(y, dim=-1)
                y = torch.stack((indices.float(), values), dim=-1)
            if self.byte_map_thresh is not None:
                y = quantize_on_device(torch, y, self.byte_map_thresh)
            return y.contiguous()

    def warmup(self) -> None:
        """Run one small zero input; a compiled model first runs every shape serving needs
        (`models.torch_compile.warmup_shapes`: that is when it compiles), and runs eagerly where
        compiling fails or passes `engine.torch.compile_budget_s`."""
        if self.compiled:
            self._warm_compiled()
        super().warmup()

    def _warm_compiled(self) -> None:
        options = self._options.torch
        shapes = warmup_shapes(
            self._spec,
            options,
            max_rows=self._options.max_rows(self._spec.kind),
            small=warmup_shape(self._spec),
        )
        state = self.compile_state
        try:
            spent_s = warm_up(
                lambda shape: self.run(np.zeros(shape, dtype=np.float32)),
                shapes,
                budget_s=options.compile_budget_s,
            )
        except Exception as err:  # Dynamo, Inductor and their compilers raise many kinds
            logger.exception(
                "compiling %s model %s failed; it runs eagerly",
                self._spec.kind,
                self._spec.model_name,
            )
            self._module = self._eager
            self.compile_state = CompileState(
                mode="off", reason=f"{state.reason}, compiling failed ({err}): eager"
            )
            return
        self.compile_state = CompileState(
            mode=state.mode, reason=state.reason, warmup_s=spent_s, graphs=len(shapes)
        )
        logger.info(
            "compiled %s model=%s mode=%s: %d shapes warmed in %.1fs",
            self._spec.kind,
            self._spec.model_name,
            state.mode,
            len(shapes),
            spent_s,
        )

    def close(self) -> None:
        """Drop the module (its device memory returns to torch's cache)."""
        self._module = None
        self._eager = None
        self._table = None
        self._lane = None


def prepare_torch(spec: ModelSpec, options: EngineOptions) -> ModelSpec:
    """`prepare_onnx`, and a graph onnx2torch can take after `for_onnx2torch`.

    Raises:
        EngineBackendError: no conversion, or a SAME padding that depends on the input's size
            (a model set with such a model is left out before any process starts).
    """
    found = prepare_onnx(spec, options)
    if found.onnx_file is None:  # pragma: no cover - prepare_onnx answers ONNX specs
        return found
    try:
        check_same_pads(found.onnx_file)
    except SamePadding as err:
        raise EngineBackendError(f"the torch engine cannot read {spec.model_name}: {err}") from err
    return found


def create_torch_predictor(spec: ModelSpec, options: EngineOptions) -> Predictor:
    """A torch predictor for the ONNX form of `spec` on `options.device`."""
    return TorchPredictor(spec, options)


TORCH = EngineBackend(
    name="torch",
    devices=frozenset({"cpu", "gpu"}),
    formats=frozenset({"onnx"}),
    create=create_torch_predictor,
    prepare=prepare_torch,
)
"""PyTorch (CUDA or CPU) on the ONNX conversions of the configured Paddle models."""
