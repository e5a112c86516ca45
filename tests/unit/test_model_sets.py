"""Unit tests for serving/model_sets.py and models/langs.py (issue 36, item 3; issue 46, item 2):
which set reads a request's `lang` or `model` (the one measured best for the language, else
configuration order), what a request for a language nobody reads is told, the options a request
gets from the set it picked, and another set made the default where the default cannot be
served."""

from __future__ import annotations

import dataclasses

import pytest

from models.bundle import ModelBundle
from models.langs import (
    LATIN_LANGS,
    MEASURED_CER,
    PPOCRV6_LANGS,
    V5_MOBILE,
    V6_SMALL,
    languages_of,
    models_for,
    rank_sets,
)
from models.spec import ModelSpec
from serving.config import AppConfig, ModelsConfig, ModelSetConfig, PipelineConfig
from serving.errors import ValidationFailed
from serving.jobs.options import parse_options
from serving.model_sets import ModelSet, ModelSets, load_sets, set_stage, stage_kind
from serving.request_options import (
    NO_CLASSIFIER,
    ocr_options,
    query_overrides,
    request_options,
)


@pytest.fixture
def sets(det_spec: ModelSpec, rec_spec: ModelSpec) -> ModelSets:
    """The default set (PP-OCRv5's languages) and a Latin one with its own queues, on the
    embedded models (only their specs are read)."""
    bundle = ModelBundle(det=det_spec, rec=rec_spec, cls=None)
    latin = ModelSet(
        name="latin",
        bundle=bundle,
        langs=LATIN_LANGS,
        stages={"det": set_stage("det", "latin"), "rec": set_stage("rec", "latin")},
    )
    return ModelSets(
        default=ModelSet(name="v5", bundle=bundle, langs=languages_of(rec_spec.model_name)),
        extra=(latin,),
        unavailable={"korean": "embedded model 'x' not found"},
    )


def test_paddleocrs_languages_of_its_recognisers() -> None:
    assert languages_of("PP-OCRv5_mobile_rec") == {"ch", "chinese_cht", "en", "japan"}
    assert languages_of("PP-OCRv6_small_rec") == PPOCRV6_LANGS
    assert {"fr", "de", "es", "pt", "it", "vi", "ch", "japan"} <= PPOCRV6_LANGS
    assert "pi" not in PPOCRV6_LANGS  # PaddleOCR 3.7 leaves Pali to PP-OCRv5's latin model
    assert "pi" in languages_of("latin_PP-OCRv5_mobile_rec")
    assert languages_of("korean_PP-OCRv5_mobile_rec") == {"korean"}
    assert languages_of("my_own_rec") == frozenset()


def test_models_to_fetch_for_a_language() -> None:
    assert models_for("korean") == ("korean_PP-OCRv5_mobile_rec",)
    assert models_for("ru") == ("eslav_PP-OCRv5_mobile_rec", "cyrillic_PP-OCRv5_mobile_rec")
    assert models_for("japan")[:2] == ("PP-OCRv6_medium_det", "PP-OCRv6_medium_rec")
    assert models_for("xx") == ()


def test_no_lang_is_the_default_set(sets: ModelSets) -> None:
    assert sets.pick() is sets.default
    assert sets.pick(None, "") is sets.default


def test_where_nothing_was_measured_the_default_reads_its_languages_first(
    sets: ModelSets,
) -> None:
    assert sets.pick("en") is sets.default  # both sets hold the same models: a tie
    assert sets.pick("fr").name == "latin"
    assert sets.pick("vi").name == "latin"


def test_model_by_name(sets: ModelSets) -> None:
    assert sets.pick(model="latin").name == "latin"
    assert sets.pick(model="v5", lang="ch") is sets.default


def test_a_language_no_set_reads_names_the_served_ones_and_how_to_fetch(sets: ModelSets) -> None:
    with pytest.raises(ValidationFailed) as refused:
        sets.pick("korean")
    message = refused.value.message
    assert "lang='korean'" in message
    assert "ch, chinese_cht, cs" in message  # the languages served, sorted
    assert "python -m models.fetch korean_PP-OCRv5_mobile_rec" in message
    assert "[models.sets." in message


def test_an_unknown_code_is_said_to_be_one(sets: ModelSets) -> None:
    with pytest.raises(ValidationFailed, match="lang='xx' is not a PaddleOCR language code"):
        sets.pick("xx")


def test_unknown_model_and_a_model_that_does_not_read_the_lang(sets: ModelSets) -> None:
    with pytest.raises(ValidationFailed, match="model 'nope' is not served here; the models"):
        sets.pick(model="nope")
    with pytest.raises(ValidationFailed, match=r"'korean' is not served here \(embedded"):
        sets.pick(model="korean")
    with pytest.raises(ValidationFailed, match="model 'v5' does not read lang='fr'"):
        sets.pick(lang="fr", model="v5")


def test_stage_names() -> None:
    assert set_stage("rec", "PP-OCRv6_small") == "rec@PP-OCRv6_small"
    assert stage_kind("rec@PP-OCRv6_small") == "rec"
    assert stage_kind("det") == "det"


def test_every_sets_models_for_the_device_workers(sets: ModelSets) -> None:
    dirs = sets.model_dirs()
    assert {"det", "rec", "det@latin", "rec@latin"} <= set(dirs)
    assert sets.extra_stages() == ["det@latin", "rec@latin"]
    assert sets.rec_dirs() == {"latin": dirs["rec@latin"]}


def test_options_without_lang_are_todays(sets: ModelSets) -> None:
    bundle = sets.default.bundle
    before = ocr_options(bundle, PipelineConfig())
    assert ocr_options(bundle, PipelineConfig(), sets=sets) == before
    assert before.model_set == ""
    assert before.stage("rec") == "rec"


def test_options_of_another_set_name_its_queues(sets: ModelSets) -> None:
    options = ocr_options(sets.default.bundle, PipelineConfig(), sets=sets, lang="fr")
    assert options.model_set == "latin"
    assert (options.stage("det"), options.stage("rec"), options.stage("cls")) == (
        "det@latin",
        "rec@latin",
        "cls",
    )


def test_lang_and_model_are_options_of_every_api(sets: ModelSets) -> None:
    assert query_overrides({"lang": "fr", "model": "latin"}) == {"lang": "fr", "model": "latin"}
    assert parse_options({"lang": "fr"}) == {"lang": "fr"}  # jobs and ocr-batch
    with pytest.raises(ValidationFailed, match="expected str"):
        parse_options({"lang": 3})
    refused = parse_options({"lang": "xx"})
    with pytest.raises(ValidationFailed, match="not a PaddleOCR language code"):
        request_options(
            sets.default.bundle, PipelineConfig(), refused, no_classifier=NO_CLASSIFIER, sets=sets
        )


def _renamed(spec: ModelSpec, model_name: str) -> ModelSpec:
    return dataclasses.replace(spec, model_name=model_name)


@pytest.fixture
def v5_then_v6(det_spec: ModelSpec, rec_spec: ModelSpec) -> ModelSets:
    """PP-OCRv5 mobile as the default and PP-OCRv6 small after it, in configuration order (the
    specs only name them: `MEASURED_CER` knows sets by their models' names)."""
    v5 = ModelBundle(det=det_spec, rec=rec_spec, cls=None)
    v6 = ModelBundle(
        det=_renamed(det_spec, "PP-OCRv6_small_det"),
        rec=_renamed(rec_spec, "PP-OCRv6_small_rec"),
        cls=None,
    )
    return ModelSets(
        default=ModelSet(name="v5", bundle=v5, langs=languages_of("PP-OCRv5_mobile_rec")),
        extra=(
            ModelSet(
                name="v6",
                bundle=v6,
                langs=PPOCRV6_LANGS,
                stages={"det": set_stage("det", "v6"), "rec": set_stage("rec", "v6")},
            ),
        ),
    )


def test_the_set_measured_best_for_a_language_reads_it_not_the_first(
    v5_then_v6: ModelSets,
) -> None:
    measured = [lang for lang in ("ch", "en", "japan") if lang in MEASURED_CER]
    assert "japan" in measured  # the issue's case: the default used to read it, a point worse
    for lang in measured:
        best = min((V5_MOBILE, V6_SMALL), key=lambda key: MEASURED_CER[lang][key])
        assert v5_then_v6.pick(lang).key == best, lang
    assert v5_then_v6.pick("japan").name == "v6"
    assert v5_then_v6.pick("chinese_cht").name == "v5"  # nobody measured it: the default first
    assert v5_then_v6.pick("japan", model="v5").name == "v5"  # a named set is the set named
    assert v5_then_v6.answering()["japan"] == "v6"


def test_ranking_needs_every_reader_measured() -> None:
    assert rank_sets("japan", [V5_MOBILE, V6_SMALL]) == [1, 0]
    assert rank_sets("japan", [V5_MOBILE, "PP-OCRv6_medium_det+PP-OCRv6_medium_rec"]) == [0, 1]
    assert rank_sets("german", [V5_MOBILE, V6_SMALL]) == rank_sets("de", [V5_MOBILE, V6_SMALL])


def test_the_shipped_config_serves_ppocrv6_small_by_default_and_v5_by_name() -> None:
    loaded = load_sets(AppConfig().models)
    assert loaded.default.name == "PP-OCRv6_small"
    assert loaded.default.key == V6_SMALL
    assert loaded.default.langs == PPOCRV6_LANGS
    assert [s.name for s in loaded.extra] == ["PP-OCRv5_mobile"], loaded.unavailable
    v5 = loaded.pick(model="PP-OCRv5_mobile")
    assert (v5.bundle.rec.model_name, v5.stage("rec")) == (
        "PP-OCRv5_mobile_rec",
        "rec@PP-OCRv5_mobile",
    )
    assert loaded.pick() is loaded.default
    assert loaded.pick("fr") is loaded.default
    assert loaded.pick("japan") is loaded.default


def test_a_set_made_the_default_takes_the_plain_queues(v5_then_v6: ModelSets) -> None:
    promoted = v5_then_v6.promote("v6", "no engine here reads it")
    assert promoted.default.name == "v6"
    assert (promoted.default.stage("det"), promoted.default.stage("rec")) == ("det", "rec")
    assert promoted.extra == ()
    assert promoted.unavailable == {"v5": "no engine here reads it; v6 is the default instead"}
    assert promoted.pick("fr").name == "v6"
    with pytest.raises(ValidationFailed, match=r"'v5' is not served here \(no engine"):
        promoted.pick(model="v5")


def test_a_set_sharing_the_old_defaults_detector_keeps_it_on_a_queue_of_its_own(
    v5_then_v6: ModelSets,
) -> None:
    shares = ModelSet(
        name="latin",
        bundle=v5_then_v6.default.bundle,
        langs=LATIN_LANGS,
        stages={"rec": set_stage("rec", "latin")},
    )
    sets = dataclasses.replace(v5_then_v6, extra=(*v5_then_v6.extra, shares))
    promoted = sets.promote("v6", "why")
    (latin,) = promoted.extra
    assert latin.stages == {"rec": "rec@latin", "det": "det@latin"}
    assert latin.bundle.det is v5_then_v6.default.bundle.det


def test_a_set_that_cannot_be_read_is_left_out_with_why() -> None:
    models = dataclasses.replace(
        ModelsConfig(), sets={"gone": ModelSetConfig(rec="/nonexistent/rec")}
    )
    loaded = load_sets(models)
    assert loaded.extra == ()
    assert "gone" in loaded.unavailable
    with pytest.raises(ValidationFailed, match="'gone' is not served here"):
        loaded.pick(model="gone")
