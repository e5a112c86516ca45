"""Which precision a device worker's models run at, and why: `engine.precision` resolved for
one device and engine backend (issue 40).

`engine.precision = "auto"` (the default) runs the torch engine on a GPU in fp16 autocast
(convolutions and matmuls in half precision; softmax and the LayerNorm variance in fp32, as CUDA
autocast keeps them), and everything else in fp32. A worker that resolved "auto" to fp16 falls
back to fp32 when its warm-up page does not read as it should at fp16
(`serving.engine.warmup.check_warmup_texts`), and says so (`fall_back`).

The evidence for fp16: the CPU's fp16 autocast (torch computes Conv2d and Linear in float16
there too) stands in for a GPU's in `make test` (tests/integration/test_torch_half.py): on the
synthetic test pages PP-OCRv5 mobile's detector and recogniser both at fp16 read within
`HALF_MAX_CER_LOSS` of fp32 per language, with no more merged words
(`loadtest.accuracy.merged_words`). bf16 (8 mantissa bits to fp16's 11) is not a stand-in for a
GPU's fp16: its recogniser drops spaces on the same pages. On the CPU fp16 is slower than fp32
(measured: the three test pages took 79 s to fp32's 64 s on a Xeon with AVX512-FP16 and AMX, two
busy cores), so "auto" keeps the CPU at fp32; "fp16" and "bf16" asked for run there all the same
(the torch engine's autocast). Measured per stage: docs/gpus.md, fp16.

Pure: nothing here imports torch, so that every device and backend is tested on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from models.engine_options import Precision, PrecisionSetting

HALF_MAX_CER_LOSS = 0.001
"""How much higher the character error rate may be at fp16 than at fp32, per language (0.1 CER
points), for "auto" to take fp16; the bound bucketed batching is held to too."""

HALF_BACKENDS = frozenset({"torch"})
"""Engine backends whose half precision `make test` checks (torch's autocast on the CPU). Paddle's
GPU fp16 (its own mixed-precision pass) runs when asked for, not under "auto"."""


@dataclass(frozen=True, slots=True)
class PrecisionPlan:
    """The precision a worker's models run at, and why (for the log and `/readyz`)."""

    precision: Precision
    reason: str
    fallback: bool = False
    """Whether the worker reloads its models at fp32 when its warm-up page reads wrong at
    `precision` ("auto" resolved to half precision); an explicit setting fails the worker."""


def choose_precision(setting: PrecisionSetting, *, gpu: bool, backend: str) -> PrecisionPlan:
    """The precision of a worker on a GPU (`gpu`) or the CPU, running `backend` ("torch",
    "paddle", ...), from `engine.precision`."""
    device = "a GPU" if gpu else "the CPU"
    if setting == "fp32":
        return PrecisionPlan("fp32", "engine.precision = 'fp32'")
    if setting == "auto":
        if not gpu:
            return PrecisionPlan("fp32", "auto: fp32 on the CPU (fp16 is slower there)")
        if backend not in HALF_BACKENDS:
            return PrecisionPlan(
                "fp32", f"auto: fp32 on the {backend} engine (fp16 is checked on torch's only)"
            )
        return PrecisionPlan(
            "fp16",
            "auto: fp16 autocast on a GPU (its CPU stand-in reads the test pages within "
            f"{HALF_MAX_CER_LOSS * 100:.1f} CER points of fp32 per language)",
            fallback=True,
        )
    if backend not in HALF_BACKENDS and (setting == "bf16" or not gpu):
        return PrecisionPlan(
            "fp32",
            f"engine.precision = {setting!r}, which the {backend} engine on {device} runs as fp32",
        )
    return PrecisionPlan(setting, f"engine.precision = {setting!r}")


def fall_back(plan: PrecisionPlan, why: str) -> PrecisionPlan:
    """`plan` given up for fp32: its warm-up page read wrong at its precision (`why`)."""
    return replace(
        plan,
        precision="fp32",
        reason=f"{plan.reason}; fell back to fp32: at {plan.precision} {why}",
        fallback=False,
    )
