"""The GPU check's probes of the torch engine alone, each on its own predictors: host syncs in a
forward and in a launch of uint8 pixels (`sync_counts`), the compute stream's busy share with two
batches in flight (`overlap_check`), how long a launch takes to return (`launch_timing`), and
load and warm-up times (`warmup_timing`). `loadtest.gpu.check` runs them as parts; on the CPU
(a dry run) they run on small shapes and what needs CUDA is reported as not measured.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from models.engine_options import EngineOptions, Precision
from models.torch_options import TorchCompile, TorchOptions
from models.torch_precision import choose_precision
from serving.config import WorkersConfig


def run_precision(args: argparse.Namespace) -> Precision:
    """The precision the run's torch engine computes in: `--precision` ("auto": fp16 on a GPU)
    resolved as a server's worker resolves `engine.precision` (`models.torch_precision`), before
    any fallback its warm-up page may cause; fp32 on the CPU (a dry run)."""
    if args.device == "cpu":
        return "fp32"
    return choose_precision(args.precision, gpu=True, backend=args.backend).precision


def torch_options(args: argparse.Namespace) -> TorchOptions:
    """`[engine.torch]` of the run (compiling takes minutes on a CPU: off there)."""
    compile_mode: TorchCompile = args.torch_compile if args.device != "cpu" else "off"
    return TorchOptions(compile=compile_mode, shapes=args.torch_shapes)


LAUNCH_SHAPES = {"det": (2, 3, 960, 960), "rec": (96, 3, 48, 1280)}
"""Large GPU batches (`[workers.gpu]` limits), where a launch that waits shows most."""


def launch_timing(args: argparse.Namespace, repeats: int = 5) -> dict[str, Any]:
    """Per model, the median time `launch` takes to return and the whole batch's (launch to
    result), on `LAUNCH_SHAPES`: a forward that reads the device back makes the first nearly
    the second (issue 27); a forward that only queues work returns in a small part of it. On
    the CPU both are the batch (it runs when issued)."""
    from models.spec import load_model_spec
    from models.torch_backend import TorchPredictor

    options = EngineOptions(
        device=args.device,
        precision=run_precision(args),
        torch=torch_options(args),
    )
    rng = np.random.default_rng(0)
    result: dict[str, Any] = {}
    shapes = LAUNCH_SHAPES if args.device != "cpu" else DRY_RUN_SHAPES
    for kind, shape in shapes.items():
        predictor = TorchPredictor(load_model_spec(args.models / kind, kind), options)
        predictor.load()
        if kind == "rec":
            predictor.output_argmax()
        batch = rng.uniform(-1, 1, shape).astype(np.float32)
        launch_ms, batch_ms = [], []
        for i in range(repeats + 1):
            slot = predictor.stage(shape)
            slot.input[...] = batch
            started = time.monotonic()
            predictor.launch(slot)
            launched = time.monotonic()
            slot.result()
            done = time.monotonic()
            slot.release()
            if i > 0:  # the first compiles and warms up
                launch_ms.append((launched - started) * 1000)
                batch_ms.append((done - started) * 1000)
        result[kind] = {
            "shape": list(shape),
            "host_reads_free": predictor.host_reads_free,
            "launch_ms": round(float(np.median(launch_ms)), 2),
            "batch_ms": round(float(np.median(batch_ms)), 2),
        }
        predictor.close()
    return result


SYNC_SHAPES = {"det": (1, 3, 960, 736), "rec": (32, 3, 48, 640)}
"""A page's det input and a rec batch, for counting host synchronisations."""
DRY_RUN_SHAPES = {"det": (1, 3, 256, 256), "rec": (4, 3, 48, 320)}
"""The syncs' and launch parts' shapes on the CPU (a dry run: the code path, in seconds)."""


def count_syncs(
    torch: Any, run: Callable[[], object], settle: Callable[[], object] = lambda: None
) -> tuple[int, str]:
    """Host synchronisations in one `run()`: the warnings `torch.cuda.set_sync_debug_mode`
    "warn" gives, and what a second run does under "error"; `settle()` after each, outside the
    mode (a launch's result, which waits by design)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
            settle()
    syncs = sum("synchroniz" in str(w.message) for w in caught)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        run()
        error_mode = "no error"
    except RuntimeError as err:
        error_mode = f"raised: {err}"[:300]
    finally:
        torch.cuda.set_sync_debug_mode("default")
        settle()
    torch.cuda.synchronize()
    return syncs, error_mode


def pixel_sizes(kind: str, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """Rows' pixel sizes as a bucketed batch has them: rec crops narrower than the batch (the
    device zeroes the rest), det pages as tall and wide as it."""
    n, _, height, width = shape
    if kind != "rec":
        return ()
    return tuple((height, max(1, width - 37 * (row % 8))) for row in range(n))


def sync_counts(args: argparse.Namespace) -> dict[str, Any]:
    """Per model, host synchronisations in one forward (issue 27: none) and in one `launch` of
    uint8 pixels (the server's path: the copy in, normalisation on the device, the model, the
    copy out; issue 40), counted by `count_syncs`; and the dtype the forward ran in (fp16 where
    `--precision fp16`). Not measured without CUDA (the launches run all the same)."""
    import torch

    from models.spec import load_model_spec
    from models.torch_backend import TorchPredictor

    options = EngineOptions(
        device=args.device,
        precision=run_precision(args),
        torch=torch_options(args),
    )
    cuda = args.device != "cpu" and torch.cuda.is_available()
    rng = np.random.default_rng(0)
    result: dict[str, Any] = {"measured": cuda}
    for kind, shape in (SYNC_SHAPES if args.device != "cpu" else DRY_RUN_SHAPES).items():
        predictor = TorchPredictor(load_model_spec(args.models / kind, kind), options)
        predictor.load()
        if kind == "rec":
            predictor.output_argmax()
        result[kind] = model_syncs(torch, predictor, kind, shape, rng, cuda=cuda)
        predictor.close()
    return result


def model_syncs(
    torch: Any,
    predictor: Any,
    kind: str,
    shape: tuple[int, ...],
    rng: np.random.Generator,
    *,
    cuda: bool,
) -> dict[str, Any]:
    """`sync_counts` of one loaded predictor: a forward of float32 on the device, and a launch
    of uint8 pixels (staged, with rows narrower than the batch as bucketed rec batches have)."""
    x = torch.from_numpy(rng.uniform(-1, 1, shape).astype(np.float32))
    x = x.to(predictor.torch_device)
    y = predictor.forward(x)  # warm: allocator, cuDNN plans
    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    launched: list[Any] = []

    def launch_pixels() -> None:
        slot = predictor.stage_pixels(pixels.shape)
        slot.input[...] = pixels
        slot.sizes = pixel_sizes(kind, pixels.shape)
        launched.append(slot)
        predictor.launch(slot)  # what is counted; its result waits by design (`settle`)

    def settle() -> None:
        while launched:
            slot = launched.pop()
            if slot.launched:
                slot.result()
            slot.release()

    launch_pixels()  # warm: the pixel path's table and slots
    settle()
    entry: dict[str, Any] = {
        "shape": list(shape),
        "host_reads_free": predictor.host_reads_free,
        "output_dtype": str(getattr(y, "dtype", "?")),
        "syncs_per_forward": None,
        "syncs_per_launch_uint8": None,
    }
    if cuda:
        syncs, entry["error_mode"] = count_syncs(torch, lambda: predictor.forward(x))
        entry["syncs_per_forward"] = syncs
        syncs, entry["launch_error_mode"] = count_syncs(torch, launch_pixels, settle)
        entry["syncs_per_launch_uint8"] = syncs
    return entry


OVERLAP_SHAPES = {"det": (8, 3, 960, 960), "rec": (96, 3, 48, 1280)}
"""Full server batches (`[workers.gpu]`'s limits), uint8, for the overlap part."""


def overlap_check(args: argparse.Namespace) -> dict[str, Any]:
    """Per model, the compute stream's busy share of a steady window with two batches in flight
    (`loadtest.gpu.overlap.compute_busy`: >= `BUSY_MIN` passes). On the CPU nothing runs
    asynchronously and there are no CUDA events: not measured (a dry run proves the code path up
    to here only)."""
    import torch

    if args.device == "cpu" or not torch.cuda.is_available():
        return {"measured": False, "why": "no CUDA events on the CPU: not measured"}
    from loadtest.gpu.overlap import BUSY_MIN, compute_busy
    from models.spec import load_model_spec
    from models.torch_backend import TorchPredictor

    options = EngineOptions(
        device=args.device,
        precision=run_precision(args),
        torch=torch_options(args),
        inflight_batches=WorkersConfig().gpu.inflight_batches,
    )
    rng = np.random.default_rng(3)
    result: dict[str, Any] = {"measured": True, "busy_min": BUSY_MIN}
    for kind, shape in OVERLAP_SHAPES.items():
        predictor = TorchPredictor(load_model_spec(args.models / kind, kind), options)
        predictor.load()
        if kind == "rec":
            predictor.output_argmax()
        batch = rng.integers(0, 256, shape, dtype=np.uint8)
        sizes = pixel_sizes(kind, shape)
        compute_busy(predictor, batch, batches=3, sizes=sizes)  # warm: shapes, allocator
        result[kind] = compute_busy(predictor, batch, sizes=sizes)
        predictor.close()
    result["passes"] = all(result[kind]["passes"] for kind in OVERLAP_SHAPES)
    return result


def warmup_timing(args: argparse.Namespace) -> dict[str, Any]:
    """Per model, how long `load` (ONNX to a torch module on the device) and `warmup` (with
    `--torch-compile`: where it compiles) take with the run's `[engine.torch]`, timed around
    what the engine does at start-up; the server's `/readyz` waits for both."""
    from models.spec import load_model_spec
    from models.torch_backend import TorchPredictor

    options = EngineOptions(
        device=args.device,
        precision=run_precision(args),
        torch=torch_options(args),
    )
    result: dict[str, Any] = {"compile": options.torch.compile, "shapes": options.torch.shapes}
    for kind in ("det", "rec"):
        predictor = TorchPredictor(load_model_spec(args.models / kind, kind), options)
        started = time.monotonic()
        predictor.load()
        loaded = time.monotonic()
        predictor.warmup()
        warmed = time.monotonic()
        result[kind] = {
            "load_s": round(loaded - started, 2),
            "warmup_s": round(warmed - loaded, 2),
        }
        predictor.close()
    return result
