"""`[engine]`: which engine backend each kind of device worker runs, and its settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from models.engine_options import (
    DEVICE_KINDS,
    OPENVINO_BF16_SETTINGS,
    OPENVINO_PRECISION_SETTINGS,
    PRECISION_SETTINGS,
    DeviceKind,
    OpenVinoBf16,
    OpenVinoPrecisionSetting,
    PrecisionSetting,
)
from models.registry import BACKENDS, backend_names
from models.torch_options import TorchOptions
from serving.config.checks import check
from serving.options import choices_text

BatchingSetting = Literal["auto", "exact", "bucketed"]
"""`[engine] batching` (`serving.scheduling.batch_shapes`)."""
BATCHING_SETTINGS: tuple[BatchingSetting, ...] = get_args(BatchingSetting)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Which engine backend each kind of device worker runs, and the engine settings.

    Options are built for each worker's own device (`serving.engine.choice.engine_options`): fp16
    and TensorRT reach GPU workers only, oneDNN CPU workers only.
    """

    cpu_backend: str = "openvino"
    """Engine backend of CPU device workers: a name in `models.registry.BACKENDS` ("openvino",
    the fastest with Paddle's text, measured: README, CPU engines; "onnxruntime"; "paddle"; or
    "fake", model-shaped answers without loading a model, for dry runs and smoke tests). The ONNX
    engines serve the models' conversions (`make convert`)."""
    gpu_backend: str = "auto"
    """Engine backend of GPU device workers: "auto" (torch when it is installed and sees a GPU,
    else Paddle when its GPU build does, else none and `devices = "auto"` serves on the CPU; the
    log and `/readyz` say which and why: `serving.engine.gpu_choice`), or a name in
    `models.registry.BACKENDS` that runs on GPUs ("torch", "paddle")."""
    cpu_threads: int = 0
    """Math threads of a CPU device worker; 0 = the CPUs this process may use (`serving.cpus`)."""
    cpu_lone_threads: int = 0
    """Threads of a batch a CPU device worker runs alone: the other CPU device workers idle and
    nothing else queued (a lone page's detector, a page of one recognition chunk), so that one
    page uses the whole machine. Each worker compiles its models a second time for them; 0 =
    the number of cores; 1 = never (nor where it is not more than `cpu_threads`)."""
    enable_mkldnn: bool = True
    mkldnn_cache_capacity: int = 10
    """Bounds oneDNN's per-shape cache (an unbounded one leaks with varying input sizes)."""
    gpu_memory_pool_mb: int = 500
    precision: PrecisionSetting = "auto"
    """"auto" (fp16 autocast for the torch engine on a GPU, falling back to fp32 where a worker's
    warm-up page reads wrong at fp16; fp32 on the CPU and on Paddle's GPU engine), "fp32",
    "fp16" (GPUs; the torch engine's autocast on the CPU too) or "bf16" (the torch engine's
    autocast in bfloat16, on GPUs and the CPU). Resolved per worker, reported in `/readyz` with
    why: `models.torch_precision`."""
    allow_tf32: bool = False
    """TF32 for CUDA matmuls and convolutions (torch engine on GPUs); off keeps fp32 exact."""
    use_tensorrt: bool = False
    trt_workspace_bytes: int = 1 << 30
    trt_min_subgraph_size: int = 3
    trt_cache_dir: str = ""
    onnx_dir: str = "var/models/onnx"
    """Cached ONNX conversions of the Paddle models, for the ONNX engines (`make convert`)."""
    paddle_dir: str = "var/models/paddle"
    """Cached Paddle conversions of the ONNX models (PP-OCRv6 small, the default set), for the
    Paddle engine (`make convert-paddle`: X2Paddle, `models.paddle_convert`)."""
    openvino_precision: OpenVinoPrecisionSetting = "auto"
    """OpenVINO's inference precision on CPU: "auto" (bf16 for a model where this CPU's
    precision check passed it: its text on the check set within 0.1 CER points of f32's and no
    more merged words; else its int8 form where one was made, `make convert-no-bf16` on a CPU
    without bf16, and the check passed it within 0.2 points; else f32; measured once per CPU
    model, OpenVINO version and model files, cached in `precision_check_dir`, reported in
    `/readyz`), "f32" (Paddle's text, on any CPU, no check), "bf16" (forced, unchecked; f32
    where the CPU has no bf16) or "int8" (NNCF's int8 models, made offline by `make
    convert-int8`: `models.quantize`; where this CPU's check passes them, else bf16 where that
    passes, else f32); see `models.openvino_precision`."""
    openvino_precision_check: bool = True
    """Whether "auto" and "int8" keep bf16 or int8 for a model only where this CPU's precision
    check passed it (`serving.engine.precision_check`). false: "auto" takes bf16 wherever the
    CPU has it and "int8" runs the int8 models, unchecked (for measurements: `make bench`)."""
    precision_check_dir: str = "var/precision"
    """Where the precision check's verdicts are cached (one JSON file per model pair, CPU model,
    OpenVINO version and check set; a lock file makes workers starting together measure once).
    Must be writable; the image keeps it on its /var/lib/ocr volume."""
    openvino_bf16: OpenVinoBf16 = "probe"
    """Whether this CPU computes in bf16: "probe" (as OpenVINO's CPU capabilities say) or
    "absent" (taken as a CPU without bf16 whatever it has: "auto" then serves each model's int8
    form where it exists and this CPU's check passes it, else f32, as on such a CPU; for tests
    and measurements of what a CPU without bf16 gets, `models.openvino_precision`)."""
    openvino_f32_head: bool = True
    """A recogniser at bf16 keeps its CTC head (last MatMul to the output) in f32: whole-model
    bf16 merged words ("Totalamount") on an AMX Xeon, this layout did not (issue 41; on a CPU
    without AMX it still merged one: each CPU's precision check decides), at bf16's speed
    (`models.openvino_layout`). false: every layer at bf16, for measurement."""
    batching: BatchingSetting = "auto"
    """How model inputs are padded so that work of different pages batches
    (`serving.scheduling.batch_shapes`): "exact" (PaddleOCR's padding and text: rec batches
    only chunks of one width, det only pages of one size), "bucketed" (crops padded to
    `torch.rec_widths_px`, detector inputs to multiples of `torch.det_step_px`, so rows of many
    pages and requests fill a batch; its CER on the bench pages is within 0.1 points of exact's
    per language), or "auto": bucketed when the server has a GPU device worker, else exact."""

    torch: TorchOptions = field(default_factory=TorchOptions)
    """The torch engine's `[engine.torch]`: `compile` ("off", "default", "reduce-overhead"),
    `shapes` ("exact" or "buckets"), `rec_widths_px` and `det_step_px`
    (`models.torch_options.TorchOptions`)."""

    def __post_init__(self) -> None:
        check(self.cpu_threads >= 0, "engine.cpu_threads", "must be >= 0")
        check(self.cpu_lone_threads >= 0, "engine.cpu_lone_threads", "must be >= 0")
        for key, problem in self.torch.problems():
            check(False, f"engine.torch.{key}", problem)
        check(
            self.openvino_precision in OPENVINO_PRECISION_SETTINGS,
            "engine.openvino_precision",
            f"must be {choices_text(OPENVINO_PRECISION_SETTINGS)}",
        )
        check(
            bool(self.precision_check_dir.strip()), "engine.precision_check_dir", "must be a path"
        )
        check(
            self.openvino_bf16 in OPENVINO_BF16_SETTINGS,
            "engine.openvino_bf16",
            f"must be {choices_text(OPENVINO_BF16_SETTINGS)}",
        )
        check(
            self.precision in PRECISION_SETTINGS,
            "engine.precision",
            f"must be {choices_text(PRECISION_SETTINGS)}",
        )
        check(
            self.batching in BATCHING_SETTINGS,
            "engine.batching",
            f"must be {choices_text(BATCHING_SETTINGS)}",
        )
        check(self.gpu_memory_pool_mb > 0, "engine.gpu_memory_pool_mb", "must be > 0")
        check(bool(self.paddle_dir), "engine.paddle_dir", "must name a folder")
        for kind in DEVICE_KINDS:
            name, path = self.backend_for(kind), f"engine.{kind}_backend"
            if kind == "gpu" and name == "auto":  # chosen at start-up, where the GPUs are seen
                continue
            known = choices_text(backend_names())
            check(name in BACKENDS, path, f"unknown engine backend {name!r}: must be {known}")
            serving = choices_text(backend_names(kind))
            runs_here = kind in BACKENDS[name].devices
            check(runs_here, path, f"{name} does not run on {kind} devices: {serving} do")

    def backend_for(self, kind: DeviceKind) -> str:
        """The backend name configured for `kind` devices ("auto" for GPUs: chosen at start-up,
        `serving.engine.gpu_choice`)."""
        return self.cpu_backend if kind == "cpu" else self.gpu_backend
