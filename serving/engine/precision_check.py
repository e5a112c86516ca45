"""This CPU's precision check: which models may run at bf16 (or int8) here, proven on this CPU.

A reduced precision changes text differently on each kind of CPU (`models.openvino_precision`),
so before a worker loads a model set it reads the check set (`serving.engine.check_set`) with
the set's detector and recogniser: both at f32, then the detector at each candidate precision
(bf16 for "auto"; int8, then bf16, for "int8") with the recogniser at f32 until one passes,
then the recogniser at each candidate with the detector at what it passed. A trial passes when
its text is within the bound of f32's and merges no more words (`models.openvino_precision.
shortfalls`); each model's verdict (`models.precision_verdict.ModelCheck`) is given to its
predictor before it loads, which then compiles the first precision that passed, else f32.

The verdict is cached (`serving.engine.precision_cache`, in `engine.precision_check_dir`) per
CPU model, OpenVINO version, model files and check set, under a lock: of N workers starting
together one measures and the others wait, then read it; a later start reads it in
milliseconds. Each model's answers are kept while it is open (the recogniser's as the argmax
pairs the served one answers), so a trial computes only what its model changed: the detector's
trial recognises only the lines it cut otherwise, the recogniser's trials detect nothing. The
check compiles its own models, on the threads of a batch run alone (the other workers wait),
frees each model's working memory after each reading and closes each model no later trial
reads with, and closes the rest before the served ones load.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.base import PredictorError
from models.bundle import ModelBundle
from models.engine_options import EngineOptions, OpenVinoPrecision
from models.langs import languages_of
from models.onnx_predictor import import_engine
from models.openvino_backend import OPENVINO, OpenVinoPredictor, cpu_capabilities
from models.openvino_precision import MAX_CER_LOSS, check_candidates, shortfalls
from models.packaged import file_sha256
from models.precision_verdict import CheckedPrecision, ModelCheck, TextScore, Trial
from models.quantize import find_int8
from models.registry import EngineChoice
from models.spec import ModelSpec
from pipelines.ocr import run_page
from pipelines.stages import MODEL_STAGES
from pipelines.text_scores import char_edits, merged_words
from pipelines.types import ClsParams
from serving.config import PipelineConfig
from serving.engine import precision_cache
from serving.engine.check_set import CheckSet, check_set_dir, ensure_check_set
from serving.model_sets import StagePair

logger = logging.getLogger(__name__)


def check_precisions(
    predictors: Mapping[str, object], pairs: Sequence[StagePair]
) -> dict[str, ModelCheck]:
    """Give each unloaded OpenVINO predictor of `pairs` whose setting needs it this CPU's
    verdict on its model (measured, or read from the cache), before it loads; returns them by
    stage. Predictors of other engines, and settings that need no check ("f32", a forced "bf16",
    `openvino_check` false, a CPU without bf16 under "auto"), are left as they are.

    Raises:
        EngineBackendError, ModelConversionError: a model of a pair has no ONNX conversion.
    """
    found: dict[str, list[ModelCheck]] = {}
    capabilities: list[str] | None = None
    for pair in pairs:
        det, rec = predictors.get(pair.det), predictors.get(pair.rec)
        if not isinstance(det, OpenVinoPredictor) or not isinstance(rec, OpenVinoPredictor):
            continue
        options = det.options
        if not options.openvino_check or options.openvino_precision in ("f32", "bf16"):
            continue
        if capabilities is None:
            capabilities = cpu_capabilities(import_engine("openvino", "openvino").Core(), options)
        setting = options.openvino_precision
        if setting == "int8" and any(
            find_int8(p.spec, Path(options.onnx_dir)) is None for p in (det, rec)
        ):
            continue  # asked for, int8 must be made first: the predictor says how when it loads
        candidates = (
            _made(check_candidates(setting, capabilities, "det"), det.spec, options),
            _made(check_candidates(setting, capabilities, "rec"), rec.spec, options),
        )
        if not any(candidates):
            continue
        det_check, rec_check = _pair_checks(det.spec, rec.spec, pair.langs, candidates, options)
        found.setdefault(pair.det, []).append(det_check)
        found.setdefault(pair.rec, []).append(rec_check)
    checks = {stage: _strictest(stage_checks) for stage, stage_checks in found.items()}
    for stage, check in checks.items():
        predictor = predictors[stage]
        if isinstance(predictor, OpenVinoPredictor):
            predictor.use_verdict(check)
    return checks


def check_worker_precisions(
    made: Mapping[str, object],
    specs: Mapping[str, ModelSpec],
    pairs: Sequence[StagePair],
    engine: EngineChoice,
) -> dict[str, ModelCheck]:
    """`check_precisions` for a device worker's unloaded predictors (`made`, by stage) and the
    pairs of the model sets it serves a stage of (none given: "det" and "rec"). A set's other
    model, where this worker does not serve it, is made for the check (`specs`, `engine`) and
    not loaded."""
    if not pairs and "det" in specs and "rec" in specs:
        pairs = (StagePair("det", "rec", tuple(sorted(languages_of(specs["rec"].model_name)))),)
    wanted = {s for p in pairs if {p.det, p.rec} & made.keys() for s in (p.det, p.rec)}
    unloaded = {
        stage: made.get(stage) or engine.predictor(specs[stage])
        for stage in wanted
        if stage in specs
    }
    return check_precisions(unloaded, [p for p in pairs if {p.det, p.rec} <= unloaded.keys()])


def _made(
    candidates: tuple[CheckedPrecision, ...], spec: ModelSpec, options: EngineOptions
) -> tuple[CheckedPrecision, ...]:
    """`candidates` less int8 where the model has no int8 form ("auto" tries it where made)."""
    if "int8" not in candidates or find_int8(spec, Path(options.onnx_dir)) is not None:
        return candidates
    return tuple(p for p in candidates if p != "int8")


def _strictest(checks: list[ModelCheck]) -> ModelCheck:
    """A detector two sets share runs at what every pair it was checked in passed: the check
    that passed fewest precisions."""
    return min(checks, key=lambda c: sum(t.passed for t in c.trials))


def _pair_checks(
    det: ModelSpec,
    rec: ModelSpec,
    langs: tuple[str, ...],
    candidates: tuple[tuple[CheckedPrecision, ...], tuple[CheckedPrecision, ...]],
    options: EngineOptions,
) -> tuple[ModelCheck, ModelCheck]:
    """The pair's verdicts: from the cache, else measured (and cached), under the cache's lock;
    a verdict with a note (f32 for both) where no check can run."""
    cache_dir = Path(options.precision_check_dir)
    onnx_dir = Path(options.onnx_dir)
    det, rec = OPENVINO.resolve(det, options), OPENVINO.resolve(rec, options)
    try:
        with precision_cache.locked(cache_dir):
            check_set = _check_set(onnx_dir)
            if check_set is None or not check_set.for_languages(langs).items:
                note = (
                    f"no check set in {check_set_dir(onnx_dir)} (make convert builds it from the "
                    "fonts and Debian doc PDFs scripts/system-deps.sh installs)"
                    if check_set is None
                    else f"the check set has no pages in the set's languages ({', '.join(langs)})"
                )
                return _noted(det, rec, note)
            fields = _key_fields(det, rec, langs, candidates, options, check_set)
            key = precision_cache.cache_key(fields)
            cached = _cached(cache_dir, key)
            if cached is not None:
                logger.info(
                    "precision check of %s + %s: %s (cached)",
                    det.model_name,
                    rec.model_name,
                    _summary(cached),
                )
                return cached
            try:
                checks = measure_pair(det, rec, langs, candidates, options, check_set)
            except PredictorError as err:  # a model that will not compile at a precision
                return _noted(det, rec, f"the check failed: {err}")
            precision_cache.write(
                cache_dir, key, {"det": checks[0].to_dict(), "rec": checks[1].to_dict()}
            )
    except OSError as err:
        logger.warning("precision check cannot use %s: %s", cache_dir, err)
        return _noted(det, rec, f"cannot use the check's cache {cache_dir}: {err}")
    logger.info(
        "precision check of %s + %s: %s (measured in %.1f s)",
        det.model_name,
        rec.model_name,
        _summary(checks),
        checks[0].measured_s,
    )
    return checks


def _cached(cache_dir: Path, key: str) -> tuple[ModelCheck, ModelCheck] | None:
    """The pair's verdicts cached under `key`; None where there are none, or they cannot be
    read (measured again, and replaced)."""
    data = precision_cache.read(cache_dir, key)
    if data is None:
        return None
    try:
        return ModelCheck.from_dict(data["det"]), ModelCheck.from_dict(data["rec"])
    except (KeyError, TypeError, ValueError) as err:
        logger.warning("precision check cache %s/%s.json unreadable: %r", cache_dir, key, err)
        return None


def _noted(det: ModelSpec, rec: ModelSpec, note: str) -> tuple[ModelCheck, ModelCheck]:
    logger.warning("no precision check of %s + %s: %s", det.model_name, rec.model_name, note)
    return ModelCheck(model=det.model_name, note=note), ModelCheck(model=rec.model_name, note=note)


def _summary(checks: tuple[ModelCheck, ModelCheck]) -> str:
    return "; ".join(
        f"{c.model}: "
        + (
            ", ".join(f"{t.precision} {'passed' if t.passed else 'failed'}" for t in c.trials)
            or "nothing tried"
        )
        for c in checks
    )


def _check_set(onnx_dir: Path) -> CheckSet | None:
    """The check set `make convert` built; built here where it has not been (a clone converted
    before the check existed), if the fonts and PDFs are installed; None where none can be."""
    directory = check_set_dir(onnx_dir)
    try:
        found = ensure_check_set(directory)
    except (OSError, ValueError) as err:
        logger.warning("no precision check set in %s: %s", directory, err)
        return None
    return found if found.items else None


def _key_fields(
    det: ModelSpec,
    rec: ModelSpec,
    langs: tuple[str, ...],
    candidates: tuple[tuple[CheckedPrecision, ...], tuple[CheckedPrecision, ...]],
    options: EngineOptions,
    check_set: CheckSet,
) -> dict[str, Any]:
    """What a pair's verdict depends on: the CPU, OpenVINO, the model files, the check set and
    which of its items were read (those of the set's languages), the candidates, the layout and
    the bounds."""
    ov = import_engine("openvino", "openvino")
    core = ov.Core()
    models = {}
    for role, spec, tried in (("det", det, candidates[0]), ("rec", rec, candidates[1])):
        onnx = spec.onnx_file
        int8 = find_int8(spec, Path(options.onnx_dir)) if "int8" in tried else None
        models[role] = {
            "name": spec.model_name,
            "onnx_sha256": file_sha256(onnx) if onnx is not None else None,
            # The int8 model's own bytes: its cache entry names its source and recipe, not the
            # calibration it was quantised with.
            "int8_sha256": [file_sha256(f) for f in (int8, int8.with_suffix(".bin"))]
            if int8 is not None
            else None,
            "candidates": list(tried),
        }
    return {
        "cpu": str(core.get_property("CPU", "FULL_DEVICE_NAME")),
        "capabilities": cpu_capabilities(core, options),
        "openvino": str(ov.get_version()),
        "models": models,
        "check_set": {"version": check_set.version, "digest": check_set.digest},
        "items": sorted(item.name for item in check_set.for_languages(langs).items),
        "f32_head": options.openvino_f32_head,
        "bounds": dict(MAX_CER_LOSS),
    }


class _Remembered:
    """A predictor whose answers are kept by input. A trial changes one model, and the other
    then sees the inputs it saw before: the f32 recogniser reads the detector's trial's lines,
    most of them cut as at f32; the detector that passed (or f32's, where none did) reads the
    same pages again in the recogniser's trials."""

    def __init__(self, predictor: OpenVinoPredictor) -> None:
        self.predictor = predictor
        self._answers: dict[tuple[tuple[int, ...], bytes], np.ndarray] = {}

    def run(self, batch: np.ndarray) -> np.ndarray:
        data = np.ascontiguousarray(batch)
        key = (data.shape, hashlib.blake2b(data.tobytes(), digest_size=16).digest())
        if key not in self._answers:
            self._answers[key] = self.predictor.run(data)
        return self._answers[key]


def measure_pair(
    det: ModelSpec,
    rec: ModelSpec,
    langs: tuple[str, ...],
    candidates: tuple[tuple[CheckedPrecision, ...], tuple[CheckedPrecision, ...]],
    options: EngineOptions,
    check_set: CheckSet,
) -> tuple[ModelCheck, ModelCheck]:
    """Read `check_set`'s pages in `langs` with the pair at f32, then the detector at each of
    its candidates (the recogniser at f32) until one passes, then the recogniser at each of its
    candidates (the detector at what passed); int8 only where the model has its int8 form."""
    from serving.request_options import ocr_options

    started = time.monotonic()
    measured_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    pages = check_set.for_languages(langs)
    bundle = ModelBundle(det=det, rec=rec, cls=None)
    ocr = ocr_options(bundle, PipelineConfig())
    threads = max(options.cpu_threads, options.lone_threads)
    own = dataclasses.replace(
        options, cpu_threads=threads, lone_threads=0, openvino_check=False, openvino_verdict=None
    )
    # The recogniser answers each step's best class and its score, as served
    # (`serving.engine.choice.model_stages`): the same text, and answers small enough to keep.
    stages = {**MODEL_STAGES, "rec": MODEL_STAGES["rec"].reading_argmax()}
    loaded: list[OpenVinoPredictor] = []

    def load(spec: ModelSpec, precision: OpenVinoPrecision) -> _Remembered:
        predictor = OPENVINO.predictor(spec, dataclasses.replace(own, openvino_precision=precision))
        if not isinstance(predictor, OpenVinoPredictor):  # internal invariant
            raise TypeError(f"{type(predictor).__name__} is not OpenVINO's")
        if spec is rec:
            predictor.output_argmax()
        predictor.load()
        loaded.append(predictor)
        return _Remembered(predictor)

    def done(model: _Remembered) -> None:
        """Close a model no later trial reads with."""
        model.predictor.close()
        loaded.remove(model.predictor)

    def trial(precision: CheckedPrecision, scores: dict[str, TextScore], partner: str) -> Trial:
        return Trial(
            precision=precision,
            scores=scores,
            shortfalls=shortfalls(scores, f32, precision),
            partner=partner,
        )

    def read(det_model: _Remembered, rec_model: _Remembered) -> dict[str, TextScore]:
        """Each language's score of the pair's text; then each model frees the working memory
        it kept for the largest page."""
        scores: dict[str, TextScore] = {}
        for item in pages.items:
            result = run_page(
                item.image,
                det=det_model.run,
                rec=rec_model.run,
                cls=None,
                det_params=ocr.det,
                rec_params=ocr.rec,
                cls_params=ClsParams(),
                charset=bundle.charset,
                stages=stages,
            )
            text = "\n".join(line.text for line in result.lines)
            edits, chars = char_edits(item.truth, text)
            score = TextScore(edits, chars, merged_words(item.truth, text))
            scores[item.lang] = scores.get(item.lang, TextScore(0, 0, 0)) + score
        for predictor in loaded:
            predictor.release_memory()
        return scores

    try:
        # Every answer is kept while its model is open: a detector's maps a few MB a page, a
        # recogniser's pairs a few KB a batch.
        det_f32, rec_f32 = load(det, "f32"), load(rec, "f32")
        f32 = read(det_f32, rec_f32)
        det_served = det_f32
        det_at: OpenVinoPrecision = "f32"
        det_trials: list[Trial] = []
        for precision in _available(candidates[0], det, options):
            model = load(det, precision)
            det_trials.append(trial(precision, read(model, rec_f32), f"{rec.model_name} at f32"))
            if det_trials[-1].passed:
                det_served, det_at = model, precision
                break
            done(model)
        done(rec_f32)  # the recogniser's trials read with their own
        rec_trials: list[Trial] = []
        for precision in _available(candidates[1], rec, options):
            model = load(rec, precision)
            partner = f"{det.model_name} at {det_at}"
            rec_trials.append(trial(precision, read(det_served, model), partner))
            done(model)
            if rec_trials[-1].passed:
                break
    finally:
        for predictor in loaded:
            predictor.close()
    checked = pages.languages
    unchecked = tuple(sorted(set(langs) - set(checked)))
    measured_s = time.monotonic() - started

    def verdict(spec: ModelSpec, trials: list[Trial]) -> ModelCheck:
        return ModelCheck(
            model=spec.model_name,
            f32=f32,
            trials=tuple(trials),
            languages=checked,
            unchecked_languages=unchecked,
            measured_at=measured_at,
            measured_s=measured_s,
        )

    return verdict(det, det_trials), verdict(rec, rec_trials)


def _available(
    candidates: tuple[CheckedPrecision, ...], spec: ModelSpec, options: EngineOptions
) -> list[CheckedPrecision]:
    """The candidates the model can run: int8 only where it has its int8 form (else the
    predictor says to make it when it loads)."""
    return [
        p for p in candidates if p != "int8" or find_int8(spec, Path(options.onnx_dir)) is not None
    ]
