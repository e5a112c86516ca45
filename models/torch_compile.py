"""How the torch engine compiles a model: `torch.compile` with the batch axis dynamic, the shapes
its warm-up runs so that serving never compiles, and Inductor's persistent cache.

Dynamo specialises every dimension by default, so a compiled model recompiled on each new batch
size while serving (tens of seconds each on a GPU, the worker blocked) and, past
`recompile_limit` (8) graphs, quietly ran eagerly (issue 40). Here the model is compiled with
`dynamic=False` and each input's batch axis marked dynamic (`maybe_mark_dynamic`: a batch of
one still gets its own graph, Dynamo specialises sizes 0 and 1), and the detector's height and
width as well; a recogniser's width stays static, so it compiles one graph per width bucket
(`TorchOptions.rec_widths_px`) and one for single rows, and a batch wider than every bucket runs
eagerly rather than compile while serving. Kernel choices can add a guard on a size range
(on the CPU, oneDNN's convolution below and above a size), so the warm-up runs every batch
bucket at every width (rec) and each batch bucket at the smallest and a large page size (det):
the graphs serving needs all exist before the worker reports ready.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from models.spec import ModelSpec
from models.torch_options import TorchCompile, TorchOptions, batch_bucket, rec_buckets

logger = logging.getLogger(__name__)

RECOMPILE_LIMIT = 64
"""Dynamo's graphs per compiled model (its default 8 is fewer than a recogniser's buckets)."""

DET_WARMUP_PX = (1792, 1280)
"""The large detector shape warmed (height, width): an A4 page at 150 dpi, padded."""


@dataclass(frozen=True, slots=True)
class CompileState:
    """What a model runs as, for the worker's ready report and `/readyz`."""

    mode: str
    """The `torch.compile` mode it runs compiled in, or "off" (eager)."""
    reason: str
    """Why: the setting, or why compiling was given up (then `mode` is "off")."""
    warmup_s: float = 0.0
    """Seconds its warm-up (compiling every served shape) took."""
    graphs: int = 0
    """Shapes run at warm-up."""


def compile_module(torch: Any, module: Any, mode: TorchCompile, cache_dir: str) -> Any:
    """`module` compiled whole in `mode`, its kernels cached in `cache_dir` ("" = torch's
    default); nothing compiles before its first call."""
    if cache_dir:
        # Inductor and Triton read their cache folder from the process environment; this
        # process is one device worker, whose models all share it.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.abspath(cache_dir)
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    return torch.compile(module, fullgraph=True, mode=mode, dynamic=False)


def mark_dynamic(torch: Any, x: Any, kind: str, options: TorchOptions) -> None:
    """Mark the axes of `x` a compiled `kind` model keeps dynamic: the batch, the detector's
    height and width, and a recogniser's width where shapes are exact (no width buckets)."""
    dims = [0]
    if kind == "det" or (
        kind == "rec" and not (options.shapes == "buckets" and options.rec_widths_px)
    ):
        dims += [2, 3] if kind == "det" else [3]
    for dim in dims:
        torch._dynamo.maybe_mark_dynamic(x, dim)


def compiled_shape(kind: str, shape: tuple[int, ...], options: TorchOptions) -> bool:
    """Whether a `kind` batch run at `shape` (its bucket) uses the compiled model: not a
    recogniser batch wider than every width bucket (it would compile while serving)."""
    if kind != "rec" or options.shapes != "buckets" or not options.rec_widths_px:
        return True
    return shape[3] in options.rec_widths_px


def warmup_shapes(
    spec: ModelSpec, options: TorchOptions, *, max_rows: int, small: tuple[int, ...]
) -> list[tuple[int, ...]]:
    """The input shapes a compiled `spec` model runs at warm-up, so that every graph serving
    needs is compiled: each batch bucket up to `max_rows`, at each recogniser width bucket, at
    the smallest and a large detector size, else at `small` (the model's warm-up shape)."""
    rows = sorted({batch_bucket(n) for n in range(1, max(1, max_rows) + 1)})
    if spec.rec_params is not None and options.rec_widths_px:
        return rec_buckets(options, height=spec.rec_params.image_height, max_batch=max(1, max_rows))
    if spec.kind == "det":
        step = options.det_step_px
        large = tuple(-(-d // step) * step for d in DET_WARMUP_PX)
        return [(n, 3, *hw) for hw in ((step, step), large) for n in rows]
    return [(n, *small[1:]) for n in rows]


def warm_up(
    run: Callable[[tuple[int, ...]], object], shapes: list[tuple[int, ...]], *, budget_s: float
) -> float:
    """Run each of `shapes` (compiling as needed); the seconds it took.

    Raises:
        TimeoutError: the runs passed `budget_s` (the model is then served eagerly).
    """
    started = time.monotonic()
    for shape in shapes:
        run(shape)
        spent = time.monotonic() - started
        if spent > budget_s:
            raise TimeoutError(
                f"compiling warm-up passed engine.torch.compile_budget_s ({budget_s:g} s) "
                f"at shape {shape}"
            )
    return time.monotonic() - started
