"""Which inference precision OpenVINO runs a model at on this CPU, and why (issue 28).

bf16 is faster where the CPU computes in it (AVX512_BF16 or AMX; OpenVINO then lists "BF16" in
the CPU plugin's `OPTIMIZATION_CAPABILITIES`) and changes some recognised text; f32 reads what
Paddle reads. `engine.openvino_precision = "auto"` takes bf16 where the CPU has it and the
model's accuracy under bf16 was checked (`BF16_CHECKED_MODELS`), f32 elsewhere: on a bf16 CPU
the default detector runs bf16 and the recogniser f32 (`BF16_FAILED_MODELS`). The choice is a
pure function of the setting, the capabilities and the model, so both kinds of CPU are tested on
either.

On a CPU without bf16 OpenVINO ignores a bf16 hint and runs f32 (OpenVINO 2026.4.1 on an AMD
EPYC without AVX512_BF16: the compiled model's INFERENCE_PRECISION_HINT reads f32); a forced
"bf16" is therefore reported as f32 there, with the reason.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from models.engine_options import OpenVinoPrecision, OpenVinoPrecisionSetting
from models.openvino_layout import HEAD_CUT

BF16_CAPABILITY = "BF16"
"""What OpenVINO's CPU `OPTIMIZATION_CAPABILITIES` lists where the CPU computes in bf16."""

BF16_MAX_CER_LOSS = 0.001
"""How much higher the character error rate may be under bf16 than under f32 (0.1 CER points)
for "auto" to take bf16; `make bench` and tests/integration/test_openvino_precision_models.py
check it."""

INT8_MAX_CER_LOSS = 0.002
"""How much higher the character error rate of NNCF's int8 models may be than f32's (0.2 CER
points) for them to be part of "auto"; `make bench` reports it (issue 28)."""

BF16_CHECKED_MODELS = frozenset({"PP-OCRv5_mobile_det", "PP-OCRv6_small_det", "PP-OCRv6_small_rec"})
"""Models "auto" runs at bf16 (a recogniser with its CTC head in f32): their pair's text under
bf16 is within `BF16_MAX_CER_LOSS` of f32's in every language and merges no more words
(`loadtest.accuracy.merged_words`) on the bench's 8 pages and the synthetic test pages
(`python -m loadtest.bench.precision_layouts`; OpenVINO 2026.4.1 on a Xeon with AMX, issue 41).
PP-OCRv5 mobile's detector at bf16 with its recogniser at f32: English 0.76% and Chinese 1.43%
CER, as f32, 9 and 13 merged words against f32's 9 and 16. PP-OCRv6 small, both at bf16: English
0.34% (f32 0.35%), Chinese 1.26% (1.32%), 10 and 21 merged words (11 and 24), 2.2x f32's
pages/s. A model joins once `make bench` shows the same on a bf16 CPU."""

BF16_FAILED_MODELS = {
    "PP-OCRv5_mobile_rec": "its text under bf16 is not within the bound (on the bench pages "
    "Chinese 1.55% CER against f32's 1.43% with the CTC head in f32, and with the detector at "
    'f32, "Total amount" read "Totalamount" on a synthetic page)',
}
"""Models measured under bf16 that failed the check, and how (issue 41): "auto" keeps them
at f32; "bf16" asked for runs them at bf16 all the same."""


@dataclass(frozen=True, slots=True)
class PrecisionChoice:
    """The precision one OpenVINO model runs at, and why (for the log and `/readyz`)."""

    precision: OpenVinoPrecision
    reason: str
    f32_head: bool = False
    """bf16 with the recogniser's CTC head in f32 (`models.openvino_layout`): whole-model bf16
    merges words ("Totalamount"), this layout does not, at bf16's speed (issue 41)."""

    @property
    def layers(self) -> str:
        """Which layers run at which precision, for `/readyz` and the log."""
        if self.f32_head:
            return f"{self.precision}, {HEAD_CUT}"
        if self.precision == "int8":
            return "int8 where NNCF quantised, f32 elsewhere"
        return f"{self.precision}, every layer"


def has_bf16(capabilities: Collection[str]) -> bool:
    """Whether OpenVINO computes in bf16 on a CPU with these optimisation capabilities."""
    return BF16_CAPABILITY in capabilities


def choose_precision(
    setting: OpenVinoPrecisionSetting,
    capabilities: Collection[str],
    model_name: str,
    kind: str = "det",
    *,
    f32_head: bool = True,
) -> PrecisionChoice:
    """The precision to compile `model_name` (a `kind` model: det, rec, cls) at, from
    `engine.openvino_precision` and the CPU's OpenVINO `OPTIMIZATION_CAPABILITIES`. A
    recogniser at bf16 keeps its CTC head in f32 (`PrecisionChoice.f32_head`) unless `f32_head`
    is false (`engine.openvino_f32_head`)."""
    choice = _choose(setting, capabilities, model_name)
    if choice.precision == "bf16" and kind == "rec" and f32_head:
        return PrecisionChoice("bf16", choice.reason, f32_head=True)
    return choice


def _choose(
    setting: OpenVinoPrecisionSetting, capabilities: Collection[str], model_name: str
) -> PrecisionChoice:
    caps = f"OpenVINO capabilities: {' '.join(capabilities) or 'none'}"
    if setting == "f32":
        return PrecisionChoice("f32", "f32 asked for (engine.openvino_precision): Paddle's text")
    if setting == "int8":
        return PrecisionChoice(
            "int8", f"int8 asked for (engine.openvino_precision): NNCF's int8 model ({caps})"
        )
    if not has_bf16(capabilities):
        if setting == "bf16":
            return PrecisionChoice("f32", f"bf16 asked for, but this CPU has no bf16 ({caps})")
        return PrecisionChoice("f32", f"auto: this CPU has no bf16 ({caps})")
    if setting == "bf16":
        return PrecisionChoice("bf16", "bf16 asked for (engine.openvino_precision)")
    if model_name in BF16_FAILED_MODELS:
        return PrecisionChoice(
            "f32", f"auto: this CPU has bf16, but {model_name}: {BF16_FAILED_MODELS[model_name]}"
        )
    if model_name not in BF16_CHECKED_MODELS:
        return PrecisionChoice(
            "f32",
            f"auto: this CPU has bf16, but {model_name}'s accuracy under bf16 is not checked "
            "(make bench on a bf16 CPU)",
        )
    return PrecisionChoice(
        "bf16",
        f"auto: this CPU has bf16 ({caps}) and the model's text under bf16 is within "
        f"{BF16_MAX_CER_LOSS * 100:.1f} CER points of f32's",
    )


def summarise(choices: dict[str, PrecisionChoice]) -> dict[str, str]:
    """One worker's `precision` and `precision_reason` from its models' choices (stage ->
    choice): one precision where all agree, else each stage's."""
    if not choices:
        return {}
    precisions = {c.precision for c in choices.values()}
    reasons = dict.fromkeys(c.reason for c in choices.values())
    layers = {"precision_layers": "; ".join(f"{s}: {c.layers}" for s, c in choices.items())}
    if len(precisions) == 1 and len(reasons) == 1:
        choice = next(iter(choices.values()))
        return {"precision": choice.precision, "precision_reason": choice.reason, **layers}
    return {
        "precision": " ".join(f"{s}={c.precision}" for s, c in choices.items()),
        "precision_reason": "; ".join(f"{s}: {c.reason}" for s, c in choices.items()),
        **layers,
    }
