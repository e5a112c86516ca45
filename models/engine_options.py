"""Engine options: how one predictor is configured on one device, whatever its backend."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

from models.torch_options import TorchOptions

if TYPE_CHECKING:
    from models.precision_verdict import ModelCheck

DeviceKind = Literal["cpu", "gpu"]
DEVICE_KINDS: tuple[DeviceKind, ...] = get_args(DeviceKind)

Precision = Literal["fp32", "fp16", "bf16"]
"""Compute precision: fp16 on GPUs (and the torch engine's autocast on the CPU, the tests' stand-in
for a GPU's); bf16 (torch autocast) on GPUs and the CPU."""
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
PrecisionSetting = Literal["auto", "fp32", "fp16", "bf16"]
"""`engine.precision`: a precision, or "auto", resolved per device and engine backend when the
worker's options are built (`models.torch_precision.choose_precision`)."""
PRECISION_SETTINGS: tuple[PrecisionSetting, ...] = get_args(PrecisionSetting)

OpenVinoPrecision = Literal["f32", "bf16", "int8"]
"""OpenVINO's CPU inference precision: f32 keeps Paddle's text; bf16 is faster and changes it;
int8 serves NNCF's int8 models (`models.quantize`, made by `make convert-int8`)."""
OPENVINO_PRECISIONS: tuple[OpenVinoPrecision, ...] = get_args(OpenVinoPrecision)
OpenVinoPrecisionSetting = Literal["auto", "f32", "bf16", "int8"]
"""`engine.openvino_precision`: a precision, or "auto", chosen per CPU and model when a model
loads (`models.openvino_precision.choose_precision`)."""
OPENVINO_PRECISION_SETTINGS: tuple[OpenVinoPrecisionSetting, ...] = get_args(
    OpenVinoPrecisionSetting
)
OpenVinoBf16 = Literal["probe", "absent"]
"""`engine.openvino_bf16`: whether this CPU's bf16 is as OpenVINO's capabilities say ("probe"),
or taken as absent: what a CPU without bf16 serves, on any CPU (`models.openvino_backend.
cpu_capabilities`)."""
OPENVINO_BF16_SETTINGS: tuple[OpenVinoBf16, ...] = get_args(OpenVinoBf16)

_DEVICE_RE = re.compile(r"^(cpu|gpu:(\d+))$")


class EngineOptionsError(ValueError):
    """Engine options that cannot work together, or a device string that is not understood."""


def device_kind(device: str) -> DeviceKind:
    """The kind of a device: "gpu" for "gpu:N", else "cpu"."""
    return "gpu" if device.startswith("gpu:") else "cpu"


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    """How one predictor is configured; a backend reads the fields that apply to its engine
    (the oneDNN, pass and TensorRT fields are Paddle Inference's)."""

    device: str = "cpu"
    """"cpu" or "gpu:N"."""
    cpu_threads: int = 4
    """Math-library threads of one predictor (CPU only)."""
    lone_threads: int = 0
    """Threads of a batch the predictor runs alone (`models.base.AloneRunner`); an engine
    that supports it compiles its model a second time for them where they are more than
    `cpu_threads`. 0: no such runs."""
    enable_mkldnn: bool = True
    """Use oneDNN kernels on CPU (3-6x faster than without on PP-OCRv5 mobile)."""
    mkldnn_cache_capacity: int = 10
    """Input shapes oneDNN caches kernels for; bounded, or every new shape leaks memory."""
    delete_passes: tuple[str, ...] = ()
    """Optimisation passes to remove, e.g. ("onednn_placement_pass",)."""
    auto_delete_passes: bool = True
    """Also remove passes known to break this Paddle version (see `passes_to_delete`)."""
    gpu_memory_pool_mb: int = 100
    """Initial GPU memory pool of the predictor."""
    precision: Precision = "fp32"
    """Compute precision (and TensorRT engine precision when `use_tensorrt`): "fp16" and "bf16"
    are the torch engine's autocast, on GPUs and the CPU; Paddle runs "fp16" on GPUs only."""
    precision_reason: str = "engine.precision"
    """Why `precision` (`models.torch_precision.PrecisionPlan`): for the log and `/readyz`."""
    precision_fallback: bool = False
    """The worker reloads its models at fp32 when its warm-up page reads wrong at `precision`
    ("auto" resolved to fp16: `models.torch_precision`)."""
    allow_tf32: bool = False
    """Let CUDA matmuls and convolutions use TF32 (torch engine; faster, less exact)."""
    use_tensorrt: bool = False
    trt_workspace_bytes: int = 1 << 30
    trt_min_subgraph_size: int = 3
    trt_use_static: bool = False
    """Serialise built TensorRT engines into `trt_cache_dir` and reuse them on the next start."""
    trt_cache_dir: str | None = None
    trt_max_batch_size: int | None = None
    """Overrides the batch dimension of the yml's TensorRT max shapes (PP-OCRv5 rec ships 8)."""
    onnx_dir: str = "var/models/onnx"
    """Where the ONNX engines find the cached conversions of Paddle models (`models.convert`)."""
    paddle_dir: str = "var/models/paddle"
    """Where the Paddle engine finds the cached conversions of ONNX models
    (`models.paddle_convert`)."""
    openvino_precision: OpenVinoPrecisionSetting = "auto"
    """OpenVINO's precision on CPU: "auto" (bf16 where this CPU's precision check passed the
    model, else its int8 form where made and passed, else f32), "f32", "bf16" or "int8"
    (`models.openvino_precision`)."""
    openvino_f32_head: bool = True
    """A recogniser at bf16 keeps its CTC head in f32 (`models.openvino_layout`)."""
    openvino_bf16: OpenVinoBf16 = "probe"
    """"absent": the precision policy and check take this CPU as one without bf16
    (`engine.openvino_bf16`)."""
    openvino_check: bool = True
    """"auto" and "int8" keep a reduced precision only where this CPU's precision check passed
    it (`engine.openvino_precision_check`); false: as asked, unchecked (measurement)."""
    precision_check_dir: str = "var/precision"
    """Where the precision check caches its verdicts (`engine.precision_check_dir`)."""
    openvino_verdict: ModelCheck | None = None
    """What this CPU's precision check found for the model these options load
    (`serving.engine.precision_check`); None: no check ran for it."""

    torch: TorchOptions = field(default_factory=TorchOptions)
    """The torch engine's compilation and shape buckets (`[engine.torch]`)."""
    max_batch_rows: tuple[tuple[str, int], ...] = ()
    """(model kind, most rows a batch of it may have) as the worker's batches are limited
    (`workers.<kind>.<stage>.max_batch_size`): the batch sizes a compiled model is warmed at."""
    inflight_batches: int = 1
    """Batches the device worker running this engine holds launched at once, and the main
    process sends it at once (`workers.<kind>.inflight_batches`); its lane keeps one page-locked
    slot more (`models.staging.lane_slots`)."""

    def __post_init__(self) -> None:
        if _DEVICE_RE.match(self.device) is None:
            raise EngineOptionsError(f"device must be 'cpu' or 'gpu:N', got {self.device!r}")
        if self.cpu_threads < 1:
            raise EngineOptionsError(f"cpu_threads must be >= 1, got {self.cpu_threads}")
        if self.lone_threads < 0:
            raise EngineOptionsError(f"lone_threads must be >= 0, got {self.lone_threads}")
        if self.inflight_batches < 1:
            raise EngineOptionsError(f"inflight_batches must be >= 1, got {self.inflight_batches}")
        if self.mkldnn_cache_capacity < 0:
            raise EngineOptionsError(
                f"mkldnn_cache_capacity must be >= 0, got {self.mkldnn_cache_capacity}"
            )
        if self.gpu_memory_pool_mb < 1:
            raise EngineOptionsError(
                f"gpu_memory_pool_mb must be >= 1, got {self.gpu_memory_pool_mb}"
            )
        if self.precision not in PRECISIONS:
            raise EngineOptionsError(
                f"precision must be 'fp32', 'fp16' or 'bf16', got {self.precision!r}"
            )
        if not self.is_gpu and self.use_tensorrt:
            raise EngineOptionsError("TensorRT needs a GPU device ('gpu:N')")
        if self.openvino_precision not in OPENVINO_PRECISION_SETTINGS:
            raise EngineOptionsError(
                "openvino_precision must be 'auto', 'f32', 'bf16' or 'int8', "
                f"got {self.openvino_precision!r}"
            )
        if self.openvino_bf16 not in OPENVINO_BF16_SETTINGS:
            raise EngineOptionsError(
                f"openvino_bf16 must be 'probe' or 'absent', got {self.openvino_bf16!r}"
            )
        for key, problem in self.torch.problems():
            raise EngineOptionsError(f"torch.{key} {problem}")
        if self.trt_max_batch_size is not None and self.trt_max_batch_size < 1:
            raise EngineOptionsError(
                f"trt_max_batch_size must be >= 1, got {self.trt_max_batch_size}"
            )

    def max_rows(self, kind: str) -> int:
        """The most rows a `kind` batch may have (`max_batch_rows`; 1 where not given)."""
        return dict(self.max_batch_rows).get(kind, 1)

    @property
    def kind(self) -> DeviceKind:
        """The device's kind."""
        return device_kind(self.device)

    @property
    def is_gpu(self) -> bool:
        """Whether the device is a GPU."""
        return self.kind == "gpu"

    @property
    def device_id(self) -> int:
        """GPU ordinal; 0 on CPU."""
        return int(self.device.split(":", 1)[1]) if self.is_gpu else 0
