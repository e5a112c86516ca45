"""The torch engine's own settings (`[engine.torch]`): compilation and the shapes it runs at.

Pure: nothing here imports torch. `bucket_shape` is the policy that maps a batch's shape to the
shape the model runs at; `models.torch_backend` pads to it and crops the answer back.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

TorchCompile = Literal["auto", "off", "default", "reduce-overhead"]
"""`torch.compile` mode of each model ("off": eager; "auto": "default" on a GPU, else "off")."""
TORCH_COMPILE_MODES: tuple[TorchCompile, ...] = get_args(TorchCompile)

TorchShapes = Literal["exact", "buckets", "auto"]
"""Run each batch at its own shape, or padded up to a bucket's; "auto": buckets on a GPU whose
server batches bucketed (`engine.batching`), else exact (`TorchOptions.resolved`)."""
TORCH_SHAPES: tuple[TorchShapes, ...] = get_args(TorchShapes)

REC_WIDTHS_PX: tuple[int, ...] = (320, 480, 640, 960, 1280, 1920, 2560, 3200)
"""Default recogniser width buckets (PP-OCRv5's rec input is 48 px high, at most 3200 wide)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchOptions:
    """How the torch engine prepares and runs its models."""

    compile: TorchCompile = "auto"
    """`torch.compile(fullgraph=True)` mode of each model: "auto" (the default: "default" on a
    GPU, "off" on the CPU, where Inductor takes minutes a real model), "off" (eager, also the
    fallback where compiling fails), "default" (Inductor: Triton kernels on GPUs) or
    "reduce-overhead" (Inductor and CUDA graphs, one recorded per input shape). The batch axis is
    dynamic (and the detector's height and width), so a recogniser compiles one graph per width
    bucket (and one for single rows); every served bucket is compiled at warm-up, before the
    worker reports ready (`models.torch_compile`)."""
    cache_dir: str = "var/cache/torch"
    """Inductor's cache (`TORCHINDUCTOR_CACHE_DIR`, Triton's kernels included) of the worker, kept
    across restarts so that a restart loads compiled kernels in seconds; "" = torch's default
    (under /tmp)."""
    compile_budget_s: float = 900.0
    """Seconds a model's compiling warm-up may take; past it the model runs eagerly (said in
    `/readyz`), so that a start never waits longer on compiling."""
    shapes: TorchShapes = "auto"
    """"exact": each batch runs at its own shape (Paddle's text). "buckets": the batch is padded
    with zeros up to its bucket (rows to `batch_bucket`, rec width to `rec_widths_px`,
    det height and width to multiples of `det_step_px`) and the answer cropped back, so a
    compiled or graph-captured model sees few shapes; the extra padding can change a few
    characters. "auto" (the default): buckets on a GPU where the server batches bucketed
    (the scheduler pads pages and crops to these buckets already, and text is already within
    its CER bound there), else exact: issue 40."""
    rec_widths_px: tuple[int, ...] = REC_WIDTHS_PX
    """Recogniser width buckets, ascending; a wider batch runs at its own width, and so does
    every batch when empty (measured on the CPU, 120 lines of the test pages: width buckets
    changed 5 lines, det and row buckets none)."""
    det_step_px: int = 128
    """Detector buckets: height and width rounded up to a multiple of this."""

    def resolved(self, *, buckets: bool) -> TorchOptions:
        """These options with `shapes = "auto"` decided: "buckets" where `buckets` (a GPU
        whose server batches bucketed), else "exact". `compile = "auto"` stays, for the
        predictor to decide and say why (`compile_mode`)."""
        if self.shapes != "auto":
            return self
        return replace(self, shapes="buckets" if buckets else "exact")

    def compile_mode(self, *, gpu: bool) -> TorchCompile:
        """The mode a model on a GPU (`gpu`) or the CPU compiles in: `compile`, "auto" decided."""
        if self.compile != "auto":
            return self.compile
        return "default" if gpu else "off"

    def problems(self) -> list[tuple[str, str]]:
        """(key, what is wrong) for each invalid setting; checked by `EngineOptions` and by the
        config (which names `engine.torch.<key>`)."""
        found: list[tuple[str, str]] = []
        if self.compile not in TORCH_COMPILE_MODES:
            found.append(("compile", f"must be one of {', '.join(TORCH_COMPILE_MODES)}"))
        if self.shapes not in TORCH_SHAPES:
            found.append(("shapes", f"must be one of {', '.join(TORCH_SHAPES)}"))
        widths = self.rec_widths_px
        if widths and (widths[0] < 1 or list(widths) != sorted(set(widths))):
            found.append(("rec_widths_px", "must be positive and ascending"))
        if self.det_step_px < 1:
            found.append(("det_step_px", "must be >= 1"))
        if self.compile_budget_s <= 0:
            found.append(("compile_budget_s", "must be > 0"))
        return found


BATCH_STEP = 16
"""Above 32 rows, batches are bucketed by multiples of this (96 stays 96, not 128)."""


def batch_bucket(n: int) -> int:
    """The rows a batch of `n` runs at: the next power of two up to 32, then the next multiple
    of `BATCH_STEP`."""
    if n <= 32:
        return 1 << max(0, n - 1).bit_length()
    return -(-n // BATCH_STEP) * BATCH_STEP


def bucket_shape(kind: str, shape: tuple[int, ...], options: TorchOptions) -> tuple[int, ...]:
    """The NCHW shape a `kind` ("det", "cls", "rec") batch of `shape` runs at: `shape` itself
    with `shapes = "exact"`, else its bucket (each dimension at least the batch's own)."""
    n, c, h, w = shape
    if options.shapes != "buckets":  # "auto" is decided before a predictor sees it
        return shape
    n = batch_bucket(n)
    if kind == "det":
        step = options.det_step_px
        return (n, c, -(-h // step) * step, -(-w // step) * step)
    if kind != "rec":  # the classifier's input has one size
        return (n, c, h, w)
    width = next((b for b in options.rec_widths_px if b >= w), w)
    return (n, c, h, width)


def rec_buckets(options: TorchOptions, *, height: int, max_batch: int) -> list[tuple[int, ...]]:
    """Every recogniser bucket up to `max_batch` rows, at `height` px (for warm-up and tests;
    det buckets are a grid of heights and widths, too many to list)."""
    batches = sorted({batch_bucket(n) for n in range(1, max_batch + 1)})
    return [(n, 3, height, w) for w in options.rec_widths_px for n in batches]
