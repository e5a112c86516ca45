"""`ocr-batch --ray`'s checks before any Ray starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.batch.cli import parse_args
from serving.batch.plan import BatchError
from serving.batch.ray_driver import (
    ActorPools,
    cpus_needed,
    fit_pools,
    for_model_set,
    run_on_ray,
)
from serving.config import AppConfig
from serving.errors import ValidationFailed


def test_ray_client_addresses_are_refused_with_the_way_out(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(BatchError, match=r"ray://.*--ray=HEAD:6379"):
        run_on_ray([str(tmp_path)], tmp_path / "out", address="ray://head:10001")
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    with pytest.raises(BatchError, match="Ray Client"):
        run_on_ray([str(tmp_path)], tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "fields", [{"det": 0}, {"rec": -1}, {"gpus_per_actor": -0.5}, {"cpus_per_task": 0}]
)
def test_pools_refuse_impossible_sizes(fields) -> None:
    with pytest.raises(ValueError, match="must be"):
        ActorPools(**fields)


def test_ray_before_the_inputs_gives_its_input_back(tmp_path: Path) -> None:
    args = parse_args(["--ray", str(tmp_path), "more.pdf", "--out", "o"])
    assert (args.ray, args.inputs) == ("", [str(tmp_path), "more.pdf"])
    args = parse_args(["--ray=head:6379", str(tmp_path), "--out", "o"])
    assert (args.ray, args.inputs) == ("head:6379", [str(tmp_path)])
    assert parse_args([str(tmp_path), "--out", "o"]).ray is None
    with pytest.raises(SystemExit):
        parse_args(["--ray", "head:6379", "--out", "o"])  # an address, and no input


def test_a_ray_of_our_own_too_small_for_the_pools_gets_them_shrunk_to_fit() -> None:
    said: list[str] = []
    defaults = ActorPools()  # 3 actors x 1 CPU + a task x 1 CPU
    assert cpus_needed(defaults) == 4
    fitted = fit_pools(defaults, 2.0, shrink=True, say=said.append)
    assert cpus_needed(fitted) == pytest.approx(2.0)
    assert (fitted.cpus_per_actor, fitted.cpus_per_task) == (0.5, 0.5)
    assert (fitted.det, fitted.rec, fitted.cls) == (1, 1, 1)
    assert "this Ray has 2 CPUs" in said[0]


def test_pools_that_fit_or_an_existing_cluster_are_left_as_asked() -> None:
    said: list[str] = []
    assert fit_pools(ActorPools(), 8.0, shrink=True, say=said.append) == ActorPools()
    assert said == []
    assert fit_pools(ActorPools(), 2.0, shrink=False, say=said.append) == ActorPools()
    assert "the run waits until it has more" in said[0]


def test_a_run_with_lang_loads_the_set_that_reads_it_as_its_models() -> None:
    """One `ocr-batch --ray --lang fr` run reads every page with the set that reads French,
    PP-OCRv6 small, the default; `--model PP-OCRv5_mobile` with PP-OCRv5 mobile: its actors load
    that set's det and rec as the default's (issue 36, item 3)."""
    config = AppConfig()
    assert for_model_set(config, {}) is config
    assert for_model_set(config, {"lang": "fr"}) is config  # the default reads it
    assert for_model_set(config, {"lang": "japan"}) is config  # read best by the default
    v5 = for_model_set(config, {"model": "PP-OCRv5_mobile"})
    assert v5.models.rec == "embedded:PP-OCRv5_mobile_rec"
    assert v5.models.det == "embedded:PP-OCRv5_mobile_det"
    assert v5.models.sets == {}
    with pytest.raises(ValidationFailed, match="lang='xx'"):
        for_model_set(config, {"lang": "xx"})


def test_lang_and_model_are_ocr_batch_flags(tmp_path: Path) -> None:
    args = parse_args(["in", "--out", str(tmp_path), "--lang", "fr", "--model", "PP-OCRv6_small"])
    assert (args.lang, args.model) == ("fr", "PP-OCRv6_small")
