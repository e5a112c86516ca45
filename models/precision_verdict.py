"""What this CPU's precision check found for one model: its text on the check set at f32 and at
each reduced precision tried, and whether each passed (issue 46).

Plain data: measured by `serving.engine.precision_check`, cached as JSON with the measurement
(`to_dict`, `from_dict`), judged by `models.openvino_precision` (which precision a model runs
at) and shown in `/readyz` (`describe`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

CheckedPrecision = Literal["bf16", "int8"]
"""The precisions a model runs at only where this CPU's check passed them."""
CacheState = Literal["hit", "fresh"]


@dataclass(frozen=True, slots=True)
class TextScore:
    """One language's text on the check set at one precision, against the pages' own text."""

    edits: int
    """Character edits (`pipelines.text_scores.char_edits`), summed over the language's items."""
    chars: int
    """Characters of the pages' own text (no whitespace)."""
    merged: int
    """Words read as one (`pipelines.text_scores.merged_words`)."""

    @property
    def cer(self) -> float:
        """Character error rate: edits / characters (0.0 where there are none)."""
        return self.edits / self.chars if self.chars else 0.0

    def __add__(self, other: TextScore) -> TextScore:
        return TextScore(
            self.edits + other.edits, self.chars + other.chars, self.merged + other.merged
        )

    def describe(self) -> dict[str, Any]:
        """For `/readyz`: CER (rounded), merged words, and what they count."""
        return {
            "cer": round(self.cer, 5),
            "merged_words": self.merged,
            "edits": self.edits,
            "chars": self.chars,
        }


Scores = Mapping[str, TextScore]
"""Language ("synthetic", or PaddleOCR's code: "en", "ch", ...) -> its score."""


def total(scores: Scores) -> TextScore:
    """Every language's score together."""
    return sum(scores.values(), TextScore(0, 0, 0))


@dataclass(frozen=True, slots=True, kw_only=True)
class Trial:
    """One reduced precision tried on a model: its scores and where it fell short of f32's."""

    precision: CheckedPrecision
    scores: Scores
    shortfalls: tuple[str, ...] = ()
    """Where it read worse than the check allows (`models.openvino_precision.shortfalls`);
    none: it passed."""
    partner: str = ""
    """The other model of the pair, and its precision, as the trial read the pages."""

    @property
    def passed(self) -> bool:
        """Whether the check allows this precision for the model."""
        return not self.shortfalls


@dataclass(frozen=True, eq=False, kw_only=True)
class ModelCheck:
    """What this CPU's precision check found for one model, or why nothing was measured."""

    model: str
    """The model's name (`Global.model_name`)."""
    f32: Scores = field(default_factory=dict)
    """Its pair's text with both models at f32: what each trial is held to."""
    trials: tuple[Trial, ...] = ()
    """Each reduced precision tried, in the order of preference."""
    languages: tuple[str, ...] = ()
    """The check set's languages read (the model set's, where the check set has lines)."""
    unchecked_languages: tuple[str, ...] = ()
    """Languages the model set reads that the check set has no lines for."""
    measured_at: str = ""
    """When (ISO 8601, UTC)."""
    measured_s: float = 0.0
    """How long the pair's measurement took, in seconds."""
    cache: CacheState = "fresh"
    """Whether this start read it from the cache ("hit") or measured it ("fresh")."""
    note: str = ""
    """Why nothing was measured (no check set ...); empty where the check ran."""

    def trial(self, precision: CheckedPrecision) -> Trial | None:
        """The trial of `precision`, where it was tried."""
        return next((t for t in self.trials if t.precision == precision), None)

    def passed(self, precision: CheckedPrecision) -> bool:
        """Whether `precision` was tried and passed."""
        trial = self.trial(precision)
        return trial is not None and trial.passed

    def with_cache(self, cache: CacheState) -> ModelCheck:
        """The same check, as read from the cache (or measured)."""
        return ModelCheck(**{**self.to_fields(), "cache": cache})

    def to_fields(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "f32": self.f32,
            "trials": self.trials,
            "languages": self.languages,
            "unchecked_languages": self.unchecked_languages,
            "measured_at": self.measured_at,
            "measured_s": self.measured_s,
            "cache": self.cache,
            "note": self.note,
        }

    def describe(self) -> dict[str, Any]:
        """For `/readyz`: each precision's CER and merged words (all languages, and each),
        whether each trial passed and why not, when it was measured and whether this start
        measured it."""
        if self.note:
            return {"model": self.model, "checked": False, "note": self.note}
        at = {"f32": _describe_scores(self.f32)}
        for trial in self.trials:
            at[trial.precision] = {
                **_describe_scores(trial.scores),
                "passed": trial.passed,
                **({"shortfalls": list(trial.shortfalls)} if trial.shortfalls else {}),
                **({"read_with": trial.partner} if trial.partner else {}),
            }
        return {
            "model": self.model,
            "checked": True,
            "at": at,
            "languages": list(self.languages),
            **(
                {"unchecked_languages": list(self.unchecked_languages)}
                if self.unchecked_languages
                else {}
            ),
            "measured_at": self.measured_at,
            "measured_s": round(self.measured_s, 1),
            "cache": self.cache,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON for the cache (`from_dict` reads it back)."""
        return {
            "model": self.model,
            "f32": _scores_to_dict(self.f32),
            "trials": [
                {
                    "precision": t.precision,
                    "scores": _scores_to_dict(t.scores),
                    "shortfalls": list(t.shortfalls),
                    "partner": t.partner,
                }
                for t in self.trials
            ],
            "languages": list(self.languages),
            "unchecked_languages": list(self.unchecked_languages),
            "measured_at": self.measured_at,
            "measured_s": self.measured_s,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], cache: CacheState = "hit") -> ModelCheck:
        """A check as `to_dict` wrote it.

        Raises:
            KeyError, TypeError, ValueError: the JSON is not one `to_dict` wrote.
        """
        return cls(
            model=str(data["model"]),
            f32=_scores_from_dict(data["f32"]),
            trials=tuple(
                Trial(
                    precision=_checked_precision(t["precision"]),
                    scores=_scores_from_dict(t["scores"]),
                    shortfalls=tuple(str(s) for s in t["shortfalls"]),
                    partner=str(t.get("partner", "")),
                )
                for t in data["trials"]
            ),
            languages=tuple(str(lang) for lang in data["languages"]),
            unchecked_languages=tuple(str(lang) for lang in data["unchecked_languages"]),
            measured_at=str(data["measured_at"]),
            measured_s=float(data["measured_s"]),
            cache=cache,
            note=str(data.get("note", "")),
        )


def _describe_scores(scores: Scores) -> dict[str, Any]:
    return {
        **total(scores).describe(),
        "by_language": {lang: score.describe() for lang, score in scores.items()},
    }


def _scores_to_dict(scores: Scores) -> dict[str, list[int]]:
    return {lang: [s.edits, s.chars, s.merged] for lang, s in scores.items()}


def _scores_from_dict(data: Mapping[str, Any]) -> dict[str, TextScore]:
    return {str(lang): TextScore(int(e), int(c), int(m)) for lang, (e, c, m) in data.items()}


def _checked_precision(value: object) -> CheckedPrecision:
    if value == "bf16":
        return "bf16"
    if value == "int8":
        return "int8"
    raise ValueError(f"not a checked precision: {value!r}")
