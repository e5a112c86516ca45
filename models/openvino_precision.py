"""Which inference precision OpenVINO runs a model at on this CPU, and why (issues 28, 41, 46).

bf16 is faster where the CPU computes in it (AVX512_BF16 or AMX; OpenVINO then lists "BF16" in
the CPU plugin's `OPTIMIZATION_CAPABILITIES`) and changes some recognised text; f32 reads what
Paddle reads. How much bf16 changes is each CPU's own: on an AMX Xeon PP-OCRv5 mobile's
recogniser at bf16 kept the synthetic pages' words, on an AMD EPYC with AVX512_BF16 and no AMX
it read "1034value" for "1034 value" (issue 46). So no CPU's verdict is carried to another:
"auto" runs a model at bf16 only where this CPU's precision check passed it
(`serving.engine.precision_check`: the check set read at f32 and at bf16, cached per CPU model,
OpenVINO version, model files and check set), else at its int8 form where one was made (`make
convert-no-bf16` makes the default set's on a CPU without bf16: `serving.convert.run`) and the check
passed that, else f32 (issue 46 item 5: without bf16, PP-OCRv6 small at f32 read 0.7x PP-OCRv5
mobile's pages/s; docs/performance.md); "int8" runs a model's int8 form only where the
check passed that, else bf16 where it passed, else f32. "f32" and a forced "bf16" run as asked,
unchecked (`engine.openvino_precision_check = false` runs "auto" and "int8" unchecked too, for
measurement).

This module is the policy: pure functions of the setting, the CPU's capabilities and the check's
scores (`models.precision_verdict`), tested with made-up scores on any machine. On a CPU without
bf16 OpenVINO ignores a bf16 hint and runs f32 (OpenVINO 2026.4.1 on an AMD EPYC without
AVX512_BF16: the compiled model's INFERENCE_PRECISION_HINT reads f32); a forced "bf16" is
therefore reported as f32 there, with the reason. What past checks found on other CPUs:
docs/performance.md.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from models.engine_options import OpenVinoBf16, OpenVinoPrecision, OpenVinoPrecisionSetting
from models.openvino_layout import HEAD_CUT
from models.precision_verdict import CheckedPrecision, ModelCheck, Scores, total

BF16_CAPABILITY = "BF16"
"""What OpenVINO's CPU `OPTIMIZATION_CAPABILITIES` lists where the CPU computes in bf16."""

BF16_MAX_CER_LOSS = 0.001
"""How much higher the character error rate may be under bf16 than under f32 (0.1 CER points)
on the check set, all languages together and each language (`shortfalls`)."""

INT8_MAX_CER_LOSS = 0.002
"""The same bound for NNCF's int8 models (0.2 CER points)."""

MAX_CER_LOSS: dict[CheckedPrecision, float] = {"bf16": BF16_MAX_CER_LOSS, "int8": INT8_MAX_CER_LOSS}

CHECKED_KINDS = frozenset({"det", "rec"})
"""The model kinds the check reads text with (a detector and a recogniser, as a pair); other
kinds (the classifiers) run f32 under "auto" and "int8"."""


@dataclass(frozen=True, slots=True)
class PrecisionChoice:
    """The precision one OpenVINO model runs at, and why (for the log and `/readyz`)."""

    precision: OpenVinoPrecision
    reason: str
    f32_head: bool = False
    """bf16 with the recogniser's CTC head in f32 (`models.openvino_layout`): whole-model bf16
    merged words ("Totalamount") on an AMX Xeon, this layout did not, at bf16's speed (issue 41)."""

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


def effective_capabilities(probed: Collection[str], bf16: OpenVinoBf16) -> list[str]:
    """The capabilities the policy reads: OpenVINO's `probed` ones, less bf16 where
    `engine.openvino_bf16` takes it as absent (what a CPU without bf16 serves, on this one)."""
    if bf16 == "absent":
        return [c for c in probed if c != BF16_CAPABILITY]
    return list(probed)


def check_candidates(
    setting: OpenVinoPrecisionSetting,
    capabilities: Collection[str],
    kind: str,
    *,
    checked: bool = True,
) -> tuple[CheckedPrecision, ...]:
    """The reduced precisions this CPU's check must try for a `kind` model, best first: none
    for "f32", a forced "bf16", unchecked settings (`checked` false) and kinds the check does
    not read; "auto": bf16 where the CPU has it, then int8; "int8": int8, then bf16 where the
    CPU has it. int8 is tried only where the model has its int8 form (the check leaves it out
    where not: `serving.engine.precision_check`), and held to `INT8_MAX_CER_LOSS`."""
    if not checked or kind not in CHECKED_KINDS or setting in ("f32", "bf16"):
        return ()
    bf16: tuple[CheckedPrecision, ...] = ("bf16",) if has_bf16(capabilities) else ()
    return ("int8", *bf16) if setting == "int8" else (*bf16, "int8")


def shortfalls(candidate: Scores, f32: Scores, precision: CheckedPrecision) -> tuple[str, ...]:
    """Where `candidate` (a model's pair at `precision`) reads the check set worse than `f32`
    (the pair at f32) beyond what the check allows; none: it passes.

    Allowed: all languages together, a CER at most `MAX_CER_LOSS[precision]` higher; each
    language, as many more character edits as that bound of its characters, but at least one (a
    few lines of a language are a few hundred characters, where one edit is 0.2-0.3 CER points:
    finer than the lines can tell, so each language is held to no more than one edit more than
    f32 there, and the languages together to the bound); and no more merged words than f32 in
    any language.
    """
    max_loss = MAX_CER_LOSS[precision]
    found = []
    for lang, base in f32.items():
        score = candidate.get(lang)
        if score is None:
            found.append(f"{lang}: not read")
            continue
        allowed = max(1, int(max_loss * base.chars))
        if score.edits - base.edits > allowed:
            found.append(
                f"{lang}: CER {score.cer:.2%} against f32's {base.cer:.2%} "
                f"({score.edits - base.edits} more character edits of {base.chars}, "
                f"at most {allowed})"
            )
        if score.merged > base.merged:
            found.append(f"{lang}: {score.merged} merged words against f32's {base.merged}")
    all_in, all_f32 = total(candidate), total(f32)
    if all_in.cer - all_f32.cer > max_loss + 1e-12:
        found.append(
            f"all: CER {all_in.cer:.2%} against f32's {all_f32.cer:.2%} "
            f"(+{(all_in.cer - all_f32.cer) * 100:.2f} points, at most {max_loss * 100:.1f})"
        )
    return tuple(found)


def choose_precision(
    setting: OpenVinoPrecisionSetting,
    capabilities: Collection[str],
    model_name: str,
    kind: str = "det",
    *,
    f32_head: bool = True,
    checked: bool = True,
    check: ModelCheck | None = None,
) -> PrecisionChoice:
    """The precision to compile `model_name` (a `kind` model: det, rec, cls, ori) at, from
    `engine.openvino_precision`, the CPU's OpenVINO `OPTIMIZATION_CAPABILITIES` and what this
    CPU's precision check found for the model (`check`; None where none ran). `checked` false
    (`engine.openvino_precision_check = false`) applies "auto" and "int8" unchecked. A
    recogniser at bf16 keeps its CTC head in f32 (`PrecisionChoice.f32_head`) unless `f32_head`
    is false (`engine.openvino_f32_head`)."""
    choice = _choose(setting, capabilities, model_name, kind, checked, check)
    if choice.precision == "bf16" and kind == "rec" and f32_head:
        return PrecisionChoice("bf16", choice.reason, f32_head=True)
    return choice


def _choose(
    setting: OpenVinoPrecisionSetting,
    capabilities: Collection[str],
    model_name: str,
    kind: str,
    checked: bool,
    check: ModelCheck | None,
) -> PrecisionChoice:
    caps = f"OpenVINO capabilities: {' '.join(capabilities) or 'none'}"
    bf16 = has_bf16(capabilities)
    if setting == "f32":
        return PrecisionChoice(
            "f32", "f32 asked for (engine.openvino_precision): Paddle's text; no check runs"
        )
    if setting == "bf16":
        if not bf16:
            return PrecisionChoice("f32", f"bf16 asked for, but this CPU has no bf16 ({caps})")
        return PrecisionChoice(
            "bf16", f"bf16 asked for (engine.openvino_precision), unchecked ({caps})"
        )
    unchecked = "unchecked (engine.openvino_precision_check = false)"
    if not checked:
        if setting == "int8":
            return PrecisionChoice("int8", f"int8 asked for, {unchecked} ({caps})")
        if bf16 and kind in CHECKED_KINDS:
            return PrecisionChoice("bf16", f"auto, {unchecked}: this CPU has bf16 ({caps})")
    asked = "auto" if setting == "auto" else "int8 asked for"
    if kind not in CHECKED_KINDS:
        return PrecisionChoice("f32", f"{asked}: {kind} models are not checked, f32 ({caps})")
    if setting == "auto" and not bf16 and (check is None or not checked):
        return PrecisionChoice(
            "f32",
            f"auto: this CPU has no bf16 ({caps}) and no int8 form of {model_name} was checked "
            "(make convert-no-bf16 makes the default set's where the CPU has no bf16): f32, "
            "nothing to check",
        )
    if check is None or check.note:
        why = check.note if check is not None else "no check ran"
        return PrecisionChoice(
            "f32", f"{asked}: {model_name} is not checked on this CPU ({why}): f32 ({caps})"
        )
    for precision in check_candidates(setting, capabilities, kind):
        if check.passed(precision):
            return PrecisionChoice(precision, f"{asked}: {_verdict(check, precision)} ({caps})")
    tried = [
        p
        for p in check_candidates(setting, capabilities, kind)
        if setting != "auto" or check.trial(p) is not None  # auto tries int8 where made only
    ]
    failed = "; ".join(_verdict(check, p) for p in tried) or "nothing tried by this CPU's check"
    return PrecisionChoice("f32", f"{asked}: {failed}: f32 ({caps})")


def _verdict(check: ModelCheck, precision: CheckedPrecision) -> str:
    """One line on what the check found for `precision`."""
    trial = check.trial(precision)
    measured = f"measured {check.measured_at}, cache {check.cache}"
    if trial is None:
        return f"{precision} not tried by this CPU's check ({measured})"
    at, f32 = total(trial.scores), total(check.f32)
    scores = (
        f"CER {at.cer:.2%} and {at.merged} merged words against f32's {f32.cer:.2%} and "
        f"{f32.merged} on {', '.join(check.languages)}"
    )
    if trial.passed:
        return f"this CPU's check passed {precision}: {scores} ({measured})"
    return f"{precision} failed this CPU's check: {'; '.join(trial.shortfalls)} ({measured})"


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
