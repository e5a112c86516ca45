"""The model sets one server holds at once, and which one reads a request.

A set is a detector and a recogniser (the classifiers are shared: they read no language). The
default set (`[models]`, PP-OCRv6 small) serves every request that names no `lang` or `model`;
each set of `[models.sets]` has batching queues of its own, named `<stage>@<set>`
(`rec@PP-OCRv5_mobile`), which every device worker serving that stage pulls from as it pulls the
default's (a set reusing the default's detector shares its `det` queue). A request names a
language (`lang`, PaddleOCR's codes: `models.langs`) or a set (`model`), and `pick` finds the set
that reads it: of the sets that read a language, the one measured to read it best
(`models.langs.rank_sets`), else the first in configuration order, the default first.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from models.bundle import ModelBundle, load_bundle
from models.langs import ALL_LANGS, languages_of, models_for, rank_sets, set_key
from serving.config import ModelsConfig
from serving.errors import ValidationFailed

logger = logging.getLogger(__name__)

STAGE_SEP = "@"
FETCH_HINT = (
    "fetch it on a machine with a network with `python -m models.fetch NAME --dest DIR` and serve "
    "it as [models.sets.NAME] (docs/models.md)"
)


def stage_kind(stage: str) -> str:
    """The model stage ("det", "cls", "rec", ...) a queue's stage name is for.

    >>> stage_kind("rec@PP-OCRv6_small"), stage_kind("det")
    ('rec', 'det')
    """
    return stage.partition(STAGE_SEP)[0]


def set_stage(kind: str, set_name: str) -> str:
    """The stage name of a non-default set's `kind` model: its queue, its predictor in a worker."""
    return f"{kind}{STAGE_SEP}{set_name}"


class StagePair(NamedTuple):
    """A model set's detector and recogniser by their stage names (its queues, a device
    worker's predictors), and the languages (PaddleOCR's codes) the set reads."""

    det: str
    rec: str
    langs: tuple[str, ...]


def default_pair(bundle: ModelBundle, langs: tuple[str, ...] = ()) -> StagePair:
    """The pair of a server with `bundle` alone: "det" and "rec", reading `langs` (none: its
    recogniser's, `models.langs`)."""
    return StagePair("det", "rec", tuple(sorted(_langs_of(bundle, langs))))


@dataclass(frozen=True, kw_only=True)
class ModelSet:
    """One detector and recogniser served together, and the languages they read."""

    name: str
    bundle: ModelBundle
    """Its det and rec, with the default set's classifiers."""
    langs: frozenset[str]
    stages: Mapping[str, str] = field(default_factory=dict)
    """Model kind -> the stage (queue) name its model has; kinds not here use the default's."""

    def stage(self, kind: str) -> str:
        """The stage that runs this set's `kind` model."""
        return self.stages.get(kind, kind)

    @property
    def key(self) -> str:
        """Its models' official names, as `models.langs.MEASURED_CER` knows the set."""
        return set_key(self.bundle.det.model_name, self.bundle.rec.model_name)

    def own_model_dirs(self) -> dict[str, str]:
        """Stage -> model directory of the models this set does not share with the default."""
        specs = self.bundle.specs
        return {stage: str(specs[kind].directory) for kind, stage in self.stages.items()}

    def describe(self) -> dict[str, Any]:
        """Its entry in `GET /v1/models` (devices, precision and the languages it answers added
        by the caller)."""
        return {
            "name": self.name,
            "languages": sorted(self.langs),
            "det": self.bundle.det.model_name,
            "rec": self.bundle.rec.model_name,
            "stages": {kind: self.stage(kind) for kind in self.bundle.specs},
        }


@dataclass(frozen=True, kw_only=True)
class ModelSets:
    """Every set a server holds: the default, the others in configuration order, and the
    configured sets it could not serve with why (left out at start, never a start-up failure)."""

    default: ModelSet
    extra: tuple[ModelSet, ...] = ()
    unavailable: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def single(cls, bundle: ModelBundle, name: str = "default") -> ModelSets:
        """One set: the server's models before there were several (tests, tools)."""
        return cls(default=ModelSet(name=name, bundle=bundle, langs=_langs_of(bundle, ())))

    @property
    def all(self) -> tuple[ModelSet, ...]:
        return (self.default, *self.extra)

    @property
    def languages(self) -> list[str]:
        """Every language some set reads, sorted."""
        return sorted(frozenset().union(*(s.langs for s in self.all)))

    def extra_stages(self) -> list[str]:
        """Stage names of the non-default sets' own models, in set order."""
        return [stage for s in self.extra for stage in s.stages.values()]

    def model_dirs(self) -> dict[str, str]:
        """Stage -> model directory, every set's: what a device worker loads."""
        dirs = dict(self.default.bundle.model_dirs)
        for s in self.extra:
            dirs.update(s.own_model_dirs())
        return dirs

    def rec_dirs(self) -> dict[str, str]:
        """Non-default set name -> its recogniser's directory (a CPU worker's CTC labels)."""
        return {s.name: str(s.bundle.rec.directory) for s in self.extra}

    def pairs(self) -> tuple[StagePair, ...]:
        """Each set's detector and recogniser stages and languages: what the precision check
        reads together (`serving.engine.precision_check`)."""
        return tuple(
            StagePair(s.stage("det"), s.stage("rec"), tuple(sorted(s.langs))) for s in self.all
        )

    def without(self, name: str, reason: str) -> ModelSets:
        """These sets less the non-default one `name`, recorded as unavailable for `reason`."""
        logger.warning("model set %s is not served: %s", name, reason)
        return ModelSets(
            default=self.default,
            extra=tuple(s for s in self.extra if s.name != name),
            unavailable={**self.unavailable, name: reason},
        )

    def promote(self, name: str, reason: str) -> ModelSets:
        """These sets with the non-default one `name` as the default, the default's models left
        out for `reason` (an engine here cannot read them): its queues become the plain `det`
        and `rec`; another set that shared the old default's detector keeps that detector on a
        queue of its own (`det@NAME`), to be checked and left out like any set."""
        old = self.default
        chosen = next(s for s in self.extra if s.name == name)
        logger.warning(
            "the default model set %s is not served: %s; %s reads the requests that name no "
            "lang or model",
            old.name,
            reason,
            name,
        )
        extra = []
        for s in self.extra:
            if s is chosen:
                continue
            stages = dict(s.stages)
            if "det" not in stages and s.bundle.det is not chosen.bundle.det:
                stages["det"] = set_stage("det", s.name)
            extra.append(dataclasses.replace(s, stages=stages))
        return ModelSets(
            default=dataclasses.replace(chosen, stages={}),
            extra=tuple(extra),
            unavailable={**self.unavailable, old.name: f"{reason}; {name} is the default instead"},
        )

    def answering(self) -> dict[str, str]:
        """Every language served -> the name of the set that reads it (`pick`)."""
        return {lang: self.pick(lang).name for lang in self.languages}

    def pick(self, lang: str | None = None, model: str | None = None) -> ModelSet:
        """The set that reads a request: the one named `model`, else the one that reads `lang`
        best (of the sets that read it, the lowest CER `models.langs.MEASURED_CER` measured
        where it measured each of them, else the first in configuration order, the default
        first), else the default.

        Raises:
            ValidationFailed: no set is named `model`, or none reads `lang` (naming the languages
                served and how to add a model that reads it), or `model` does not read `lang`.
        """
        if model:
            chosen = next((s for s in self.all if s.name == model), None)
            if chosen is None:
                why = f" ({self.unavailable[model]})" if model in self.unavailable else ""
                names = ", ".join(s.name for s in self.all)
                raise ValidationFailed(
                    f"model {model[:60]!r} is not served here{why}; the models are {names} "
                    "(GET /v1/models)"
                )
            if lang and lang not in chosen.langs:
                raise ValidationFailed(
                    f"model {chosen.name!r} does not read lang={lang[:40]!r}; it reads "
                    f"{', '.join(sorted(chosen.langs))}"
                )
            return chosen
        if not lang:
            return self.default
        readers = [s for s in self.all if lang in s.langs]
        if not readers:
            raise ValidationFailed(self._no_model_reads(lang))
        return readers[rank_sets(lang, [s.key for s in readers])[0]]

    def _no_model_reads(self, lang: str) -> str:
        served = ", ".join(self.languages)
        if lang not in ALL_LANGS:
            return (
                f"lang={lang[:40]!r} is not a PaddleOCR language code; the languages served "
                f"here are {served}"
            )
        names = " ".join(models_for(lang))
        return (
            f"no model served here reads lang={lang!r}; the languages served are {served}. "
            f"A model that reads it: {names}; "
            + FETCH_HINT.replace("NAME --dest", f"{names.split()[-1]} --dest")
        )


def load_sets(models: ModelsConfig) -> ModelSets:
    """The configured sets (`[models]` and `[models.sets]`), their models located and read.

    A non-default set whose models cannot be found or read (a package not installed) is left
    out with a warning and listed in `unavailable` (as is one no engine reads: `without`, from
    `Runtime.build`); the default set's failures raise as before. A set with the default's own
    models is the default.

    Raises:
        EmbeddedModelError, ModelSpecError: the default set's models cannot be read.
    """
    default_bundle = load_bundle(models.det, models.rec, models.cls, models.ori)
    default = ModelSet(
        name=models.name or default_bundle.rec.model_name.removesuffix("_rec"),
        bundle=default_bundle,
        langs=_langs_of(default_bundle, models.langs),
    )
    sets = ModelSets(default=default)
    for name, spec in models.sets.items():
        if (spec.det or models.det, spec.rec) == (models.det, models.rec):
            logger.info("model set %s: the default set's models, served as the default", name)
            continue
        if name == default.name:
            sets = sets.without(name, "the default set has this name; name one of them otherwise")
            continue
        try:
            own_det = bool(spec.det) and spec.det != models.det
            loaded = load_bundle(spec.det or models.det, spec.rec)
            bundle = ModelBundle(
                det=loaded.det if own_det else default_bundle.det,
                rec=loaded.rec,
                cls=default_bundle.cls,
                ori=default_bundle.ori,
            )
            stages = {"rec": set_stage("rec", name)}
            if own_det:
                stages["det"] = set_stage("det", name)
            model_set = ModelSet(
                name=name, bundle=bundle, langs=_langs_of(bundle, spec.langs), stages=stages
            )
        except (ValueError, OSError) as err:  # EmbeddedModelError, ModelSpecError
            sets = sets.without(name, str(err))
            continue
        sets = ModelSets(
            default=default, extra=(*sets.extra, model_set), unavailable=sets.unavailable
        )
    return sets


def _langs_of(bundle: ModelBundle, configured: tuple[str, ...]) -> frozenset[str]:
    return frozenset(configured) or languages_of(bundle.rec.model_name)
