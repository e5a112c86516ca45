"""Unit tests for serving/config.py (TOML -> typed config) and serving/cli.py's overrides."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from models.base import EngineBackend
from models.fake_predictor import create_fake_predictor
from models.registry import BACKENDS
from serving.cli import parse_args, resolve_config
from serving.config import (
    AppConfig,
    DeviceClassConfig,
    ServerConfig,
    StageLimits,
    WorkersConfig,
    build,
    describe,
    load_config,
    with_paths_resolved,
)
from serving.config_paths import defaults_base
from serving.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]


def _build(raw: dict[str, Any]) -> AppConfig:
    return build(AppConfig, raw)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


# --- the documented file --------------------------------------------------------------------


def test_repo_config_toml_equals_defaults() -> None:
    # Paths are made absolute against the file's folder (serving/config_paths.py).
    assert load_config(REPO_ROOT / "config.toml") == with_paths_resolved(AppConfig(), REPO_ROOT)


def test_load_config_none_is_defaults() -> None:
    assert load_config(None) == with_paths_resolved(AppConfig(), REPO_ROOT)


def test_empty_file_is_defaults(tmp_path: Path) -> None:
    defaults = with_paths_resolved(AppConfig(), defaults_base())
    jobs = dataclasses.replace(defaults.jobs, data_dir=str(tmp_path / "var/jobs"))  # beside it
    assert load_config(_write(tmp_path, "")) == dataclasses.replace(defaults, jobs=jobs)


def test_values_from_file_are_applied(tmp_path: Path) -> None:
    text = """
[server]
port = 9001
overload_status = 429
[pipeline.det]
limit_type = "max"
thresh = 0.25
[workers]
devices = ["gpu:0", "gpu:1", "cpu"]
[workers.gpu]
stages = ["det"]
det = { max_batch_size = 4, max_cost = 1000 }
[workers.rec_queue]
max_wait_ms = 2.5
"""
    config = load_config(_write(tmp_path, text))
    assert config.server.port == 9001
    assert config.server.overload_status == 429
    assert config.server.host == "127.0.0.1"  # untouched keys keep their defaults
    assert config.pipeline.det.limit_type == "max"
    assert config.pipeline.det.thresh == 0.25
    assert config.pipeline.det.box_thresh == 0.6
    assert config.workers.devices == ("gpu:0", "gpu:1", "cpu")
    assert config.workers.gpu.stages == ("det",)
    assert config.workers.gpu.det == StageLimits(max_batch_size=4, max_cost=1000)
    assert config.workers.gpu.rec == StageLimits(max_batch_size=96, max_cost=96 * 1600)
    assert config.workers.queue("rec").max_wait_ms == 2.5
    assert config.workers.queue("det").max_wait_ms == 0.0


# --- unknown keys ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"bogus": 1}, "bogus"),
        ({"server": {"prot": 8000}}, "server.prot"),
        ({"pipeline": {"det": {"threshold": 0.3}}}, "pipeline.det.threshold"),
        ({"workers": {"rec_queue": {"max_wait": 1.0}}}, "workers.rec_queue.max_wait"),
        ({"workers": {"cpu": {"det": {"max_batch": 2}}}}, "workers.cpu.det.max_batch"),
        ({"workers": {"gpu": {"ocr": {"max_batch_size": 2}}}}, "workers.gpu.ocr"),
    ],
)
def test_unknown_key_names_full_path(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{re.escape(path)}: unknown key$") as info:
        _build(raw)
    assert info.value.path == path


def test_unknown_key_in_file_names_path(tmp_path: Path) -> None:
    path = _write(tmp_path, "[workers.cpu.det]\nmax_batch = 3\n")
    with pytest.raises(ConfigError, match=r"workers\.cpu\.det\.max_batch"):
        load_config(path)


# --- wrong types ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "path", "problem"),
    [
        ({"server": {"port": "8000"}}, "server.port", "must be int, got str"),
        ({"server": {"port": True}}, "server.port", "must be int, got bool"),
        ({"server": {"port": 8000.0}}, "server.port", "must be int, got float"),
        ({"server": {"host": 1}}, "server.host", "must be str, got int"),
        ({"input": {"allow_url": 1}}, "input.allow_url", "must be bool, got int"),
        ({"input": {"pdf_render_scale": "2"}}, "input.pdf_render_scale", "must be float, got str"),
        ({"input": {"pdf_render_scale": True}}, "input.pdf_render_scale", "must be float"),
        ({"server": [1, 2]}, "server", "must be a table"),
        ({"pipeline": {"det": 3}}, "pipeline.det", "must be a table"),
        ({"workers": {"cpu": {"det": [1, 2]}}}, "workers.cpu.det", "must be a table"),
        ({"workers": {"devices": 0}}, "workers.devices", "must be a list"),
        ({"workers": {"devices": {"a": 1}}}, "workers.devices", "must be a list"),
        ({"workers": {"devices": ["cpu", 0]}}, "workers.devices", "must be str, got int"),
        ({"workers": {"cpu": {"stages": [1]}}}, "workers.cpu.stages", "must be str, got int"),
    ],
)
def test_wrong_type_names_path(raw: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        _build(raw)
    assert info.value.path == path
    assert str(info.value).startswith(f"{path}: {problem}")


def test_root_must_be_table() -> None:
    with pytest.raises(ConfigError, match=r"^<root>: must be a table$"):
        build(AppConfig, [])  # type: ignore[arg-type]


def test_partial_gpu_table_keeps_gpu_defaults() -> None:
    # Every key is optional (config.toml): a partial [workers.gpu] keeps the GPU defaults of the
    # keys it leaves out, not DeviceClassConfig's CPU-sized field defaults.
    config = _build({"workers": {"gpu": {"stages": ["det"], "det": {"max_batch_size": 2}}}})
    gpu = config.workers.gpu
    assert gpu.stages == ("det",)
    assert gpu.det == StageLimits(max_batch_size=2, max_cost=32_000_000)
    assert gpu.rec == StageLimits(max_batch_size=96, max_cost=96 * 1600)
    assert gpu.cls == StageLimits(max_batch_size=96, max_cost=96 * 1600)
    assert config.workers.cpu == DeviceClassConfig()


def test_partial_cpu_stage_table_keeps_cpu_defaults() -> None:
    config = _build({"workers": {"cpu": {"rec": {"max_cost": 999}}}})
    assert config.workers.cpu.rec == StageLimits(max_batch_size=24, max_cost=999)
    assert config.workers.cpu.det == StageLimits(max_batch_size=1, max_cost=16_000_000)


def test_partial_nested_table_keeps_sibling_defaults() -> None:
    config = _build({"pipeline": {"det": {"thresh": 0.2}}, "workers": {"gpu_instances": 2}})
    assert config.pipeline.det.thresh == 0.2
    assert config.pipeline.det.unclip_ratio == 1.5
    assert config.pipeline.rec == AppConfig().pipeline.rec
    assert config.workers.gpu == AppConfig().workers.gpu
    assert config.workers.gpu_instances == 2


def test_partial_queue_table_keeps_its_own_defaults() -> None:
    # Queue fields may default differently per stage (via default_factory); a partial table
    # keeps the stage's default, not QueueConfig's.
    defaults = AppConfig().workers
    config = _build({"workers": {"rec_queue": {"max_queue_len": 10}}})
    assert config.workers.rec_queue.max_queue_len == 10
    assert config.workers.rec_queue.max_wait_ms == defaults.rec_queue.max_wait_ms
    assert config.workers.cls_queue == defaults.cls_queue


def test_missing_required_field_without_default_names_path() -> None:
    # StageLimits has no field defaults: built on its own, a partial table is refused.
    with pytest.raises(ConfigError) as info:
        build(StageLimits, {"max_batch_size": 2}, "a.b")
    assert info.value.path == "a.b"
    assert "max_cost" in str(info.value)


# --- conversions ----------------------------------------------------------------------------


def test_devices_string_shorthand_becomes_tuple() -> None:
    assert _build({"workers": {"devices": "auto"}}).workers.devices == ("auto",)
    assert _build({"workers": {"devices": "gpu:3"}}).workers.devices == ("gpu:3",)


def test_list_becomes_tuple() -> None:
    config = _build({"workers": {"cpu": {"stages": ["det", "rec"]}}})
    assert config.workers.cpu.stages == ("det", "rec")
    assert isinstance(config.workers.cpu.stages, tuple)


def test_int_accepted_for_float_field() -> None:
    config = _build({"server": {"request_timeout_s": 12}, "pipeline": {"det": {"thresh": 0}}})
    assert config.server.request_timeout_s == 12.0
    assert type(config.server.request_timeout_s) is float
    assert config.pipeline.det.thresh == 0.0
    assert type(config.pipeline.det.thresh) is float


# --- validation in __post_init__ / check() --------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"server": {"port": 0}}, "server.port"),
        ({"server": {"port": 65536}}, "server.port"),
        ({"server": {"port": -1}}, "server.port"),
        ({"server": {"max_body_bytes": 0}}, "server.max_body_bytes"),
        ({"server": {"request_timeout_s": 0}}, "server.request_timeout_s"),
        ({"server": {"max_inflight_pages": 0}}, "server.max_inflight_pages"),
        ({"server": {"limit_concurrency": -1}}, "server.limit_concurrency"),
        ({"server": {"overload_status": 500}}, "server.overload_status"),
        ({"server": {"overload_status": 200}}, "server.overload_status"),
        ({"server": {"shutdown_grace_s": -0.5}}, "server.shutdown_grace_s"),
        ({"input": {"max_pdf_pages": 0}}, "input.max_pdf_pages"),
        ({"input": {"pdf_render_scale": 0}}, "input.pdf_render_scale"),
        ({"input": {"max_image_pixels": 0}}, "input.max_image_pixels"),
        ({"pipeline": {"det": {"limit_type": "long"}}}, "pipeline.det.limit_type"),
        ({"pipeline": {"det": {"limit_side_len": 0}}}, "pipeline.det.limit_side_len"),
        ({"pipeline": {"det": {"max_side_limit": 31}}}, "pipeline.det.max_side_limit"),
        # Values the CPU worker cannot run with (found by test_properties_requests.py).
        ({"pipeline": {"det": {"limit_side_len": 100_001}}}, "pipeline.det.limit_side_len"),
        ({"pipeline": {"det": {"unclip_ratio": -2.0}}}, "pipeline.det.unclip_ratio"),
        ({"pipeline": {"det": {"unclip_ratio": 1e14}}}, "pipeline.det.unclip_ratio"),
        ({"pipeline": {"det": {"thresh": math.nan}}}, "pipeline.det.thresh"),
        ({"pipeline": {"det": {"box_thresh": math.inf}}}, "pipeline.det.box_thresh"),
        ({"pipeline": {"rec": {"score_thresh": math.nan}}}, "pipeline.rec.score_thresh"),
        ({"input": {"pdf_render_scale": math.inf}}, "input.pdf_render_scale"),
        ({"workers": {"rec_queue": {"max_wait_ms": math.nan}}}, "workers.rec_queue.max_wait_ms"),
        ({"server": {"request_timeout_s": 10**400}}, "server.request_timeout_s"),
        ({"pipeline": {"rec": {"batch_size": 0}}}, "pipeline.rec.batch_size"),
        ({"engine": {"cpu_threads": -1}}, "engine.cpu_threads"),
        ({"engine": {"cpu_lone_threads": -1}}, "engine.cpu_lone_threads"),
        ({"engine": {"precision": "int8"}}, "engine.precision"),
        ({"engine": {"cpu_backend": "tensorrt"}}, "engine.cpu_backend"),
        ({"engine": {"gpu_backend": "tests.fakes.predictors:SLOW_FAKE"}}, "engine.gpu_backend"),
        ({"engine": {"gpu_memory_pool_mb": 0}}, "engine.gpu_memory_pool_mb"),
        ({"workers": {"cpu_workers": -1}}, "workers.cpu_workers"),
        ({"workers": {"gpu_instances": 0}}, "workers.gpu_instances"),
        ({"workers": {"devices": []}}, "workers.devices"),
        ({"workers": {"devices": ["tpu:0"]}}, "workers.devices"),
        ({"workers": {"devices": ["gpu:"]}}, "workers.devices"),
        ({"workers": {"devices": ["gpu:x"]}}, "workers.devices"),
        ({"workers": {"devices": ["GPU"]}}, "workers.devices"),
        ({"workers": {"cpu": {"stages": ["det", "ocr"]}}}, "workers.cpu.stages"),
        ({"workers": {"gpu": {"stages": ["layout"]}}}, "workers.gpu.stages"),
    ],
)
def test_invalid_value_names_path(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as info:
        _build(raw)
    assert info.value.path == path
    assert str(info.value).startswith(f"{path}: ")


@pytest.mark.parametrize("status", [429, 503])
def test_overload_status_accepts_429_and_503(status: int) -> None:
    assert ServerConfig(overload_status=status).overload_status == status


@pytest.mark.parametrize("port", [1, 65535])
def test_port_bounds_inclusive(port: int) -> None:
    assert ServerConfig(port=port).port == port


@pytest.mark.parametrize("limit_type", ["min", "max", "resize_long"])
def test_limit_types_accepted(limit_type: str) -> None:
    config = _build({"pipeline": {"det": {"limit_type": limit_type}}})
    assert config.pipeline.det.limit_type == limit_type


def test_a_literal_key_names_its_choices() -> None:
    message = r"^pipeline\.det\.limit_type: must be min, max or resize_long, got 'long'$"
    with pytest.raises(ConfigError, match=message):
        _build({"pipeline": {"det": {"limit_type": "long"}}})
    with pytest.raises(ConfigError, match=r"^pipeline\.det\.limit_type: must be min, max"):
        _build({"pipeline": {"det": {"limit_type": 1}}})


def test_engine_backends_are_checked_against_the_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _build({"engine": {"gpu_backend": "fake"}}).engine.backend_for("gpu") == "fake"
    known = ", ".join(BACKENDS).rsplit(", ", 1)
    message = rf"^engine\.cpu_backend: unknown engine backend 'onnx': must be {' or '.join(known)}$"
    with pytest.raises(ConfigError, match=message):
        _build({"engine": {"cpu_backend": "onnx"}})
    cpu_only = EngineBackend(
        name="cpu-only",
        devices=frozenset({"cpu"}),
        formats=frozenset({"paddle"}),
        create=create_fake_predictor,
    )
    backends = {**BACKENDS, "cpu-only": cpu_only}
    monkeypatch.setattr("serving.config.engine.BACKENDS", backends)
    monkeypatch.setattr("models.registry.BACKENDS", backends)
    assert _build({"engine": {"cpu_backend": "cpu-only"}}).engine.cpu_backend == "cpu-only"
    on_gpu = ", ".join(n for n, b in BACKENDS.items() if "gpu" in b.devices).rsplit(", ", 1)
    serving = " or ".join(on_gpu)
    message = rf"^engine\.gpu_backend: cpu-only does not run on gpu devices: {serving} do$"
    with pytest.raises(ConfigError, match=message):
        _build({"engine": {"gpu_backend": "cpu-only"}})


def test_bad_device_message_names_device() -> None:
    with pytest.raises(ConfigError, match=r"^workers\.devices: unknown device 'tpu:0'$"):
        _build({"workers": {"devices": ["cpu", "tpu:0"]}})


def test_good_devices_accepted() -> None:
    devices = ("auto", "cpu", "gpu:0", "gpu:12")
    assert WorkersConfig(devices=devices).devices == devices


def test_unknown_stage_message_names_stage() -> None:
    with pytest.raises(ConfigError, match=r"^workers\.cpu\.stages: unknown stage 'ocr'$"):
        _build({"workers": {"cpu": {"stages": ["ocr"]}}})


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
@pytest.mark.parametrize("stage", ["det", "rec", "cls"])
@pytest.mark.parametrize("field_name", ["max_batch_size", "max_cost"])
@pytest.mark.parametrize("value", [0, -1])
def test_stage_limits_must_be_positive(kind: str, stage: str, field_name: str, value: int) -> None:
    limits = {"max_batch_size": 2, "max_cost": 100, field_name: value}
    with pytest.raises(ConfigError) as info:
        _build({"workers": {kind: {stage: limits}}})
    assert info.value.path == f"workers.{kind}.{stage}.{field_name}"
    assert str(info.value) == f"workers.{kind}.{stage}.{field_name}: must be > 0"


def test_device_class_check_direct() -> None:
    bad = DeviceClassConfig(rec=StageLimits(max_batch_size=1, max_cost=0))
    with pytest.raises(ConfigError, match=r"^x\.y\.rec\.max_cost: must be > 0$"):
        bad.check("x.y")
    DeviceClassConfig().check("x.y")  # defaults are valid


# --- load_config errors ---------------------------------------------------------------------


def test_missing_file_names_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="cannot read") as info:
        load_config(missing)
    assert info.value.path == str(missing)
    assert str(missing) in str(info.value)


def test_invalid_toml_names_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "[server\nport = 1\n")
    with pytest.raises(ConfigError, match="invalid TOML") as info:
        load_config(path)
    assert info.value.path == str(path)
    assert str(info.value).startswith(f"{path}: invalid TOML")


def test_duplicate_key_is_invalid_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, "[server]\nport = 1\nport = 2\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(path)


# --- describe -------------------------------------------------------------------------------


def test_describe_reports_effective_counts_when_zero() -> None:
    config = AppConfig()
    assert config.workers.cpu_workers == 0
    assert config.engine.cpu_threads == 0
    cores = os.cpu_count() or 1
    threads = max(1, cores // config.workers.cpu_instances)  # the cores split between instances
    data = describe(config)
    assert data["workers"]["cpu_workers"] == cores
    assert data["engine"]["cpu_threads"] == threads
    assert config.cpu_workers == cores
    assert config.cpu_threads == threads
    # The config itself is not changed.
    assert config.workers.cpu_workers == 0


def test_describe_keeps_explicit_counts_and_values() -> None:
    config = _build({"workers": {"cpu_workers": 3}, "engine": {"cpu_threads": 5}})
    data = describe(config)
    assert data["workers"]["cpu_workers"] == 3
    assert data["engine"]["cpu_threads"] == 5
    assert data["server"]["port"] == 8000
    assert data["workers"]["gpu"]["rec"] == {"max_batch_size": 96, "max_cost": 153600}
    assert data["workers"]["devices"] == ("auto",)


def test_a_shared_job_store_is_a_postgresql_url_whose_password_is_never_logged() -> None:
    assert AppConfig().jobs.store == "sqlite"
    url = "postgresql://ocr:s3cret@db.internal:5432/ocr?sslmode=require"
    config = _build({"jobs": {"store": url, "lease_s": 10.0, "poll_interval_s": 0.5}})
    assert config.jobs.store == url
    logged = describe(config)["jobs"]["store"]
    assert logged == "postgresql://ocr:***@db.internal:5432/ocr?sslmode=require"
    with pytest.raises(ConfigError, match=r"jobs\.store.*mysql://ocr:\*\*\*@db/ocr"):
        _build({"jobs": {"store": "mysql://ocr:s3cret@db/ocr"}})
    with pytest.raises(ConfigError, match=r"jobs\.poll_interval_s.*< jobs\.lease_s"):
        _build({"jobs": {"store": url, "lease_s": 1.0, "poll_interval_s": 2.0}})


# --- cli.resolve_config ---------------------------------------------------------------------


def test_resolve_config_file_only(tmp_path: Path) -> None:
    path = _write(tmp_path, '[server]\nhost = "0.0.0.0"\nport = 9100\nlog_level = "debug"\n')
    config = resolve_config(parse_args(["--config", str(path)]))
    assert config.server.host == "0.0.0.0"
    assert config.server.port == 9100
    assert config.server.log_level == "debug"


def test_resolve_config_flags_override_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        '[server]\nhost = "0.0.0.0"\nport = 9100\nlog_level = "debug"\nretry_after_s = 7\n'
        "[input]\nmax_pdf_pages = 4\n",
    )
    args = parse_args(
        ["--config", str(path), "--host", "10.1.2.3", "--port", "9200", "--log-level", "warning"]
    )
    config = resolve_config(args)
    assert config.server.host == "10.1.2.3"
    assert config.server.port == 9200
    assert config.server.log_level == "warning"
    # Everything else still comes from the file.
    assert config.server.retry_after_s == 7
    assert config.input.max_pdf_pages == 4


def test_resolve_config_single_flag(tmp_path: Path) -> None:
    path = _write(tmp_path, '[server]\nhost = "0.0.0.0"\nport = 9100\n')
    config = resolve_config(parse_args(["--config", str(path), "--port", "7000"]))
    assert config.server.port == 7000
    assert config.server.host == "0.0.0.0"


def test_resolve_config_bad_port_flag_is_config_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "")
    with pytest.raises(ConfigError, match=r"^server\.port: "):
        resolve_config(parse_args(["--config", str(path), "--port", "70000"]))


def test_resolve_config_without_file_uses_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OCR_CONFIG", raising=False)
    config = resolve_config(parse_args(["--port", "8123"]))
    assert config.server.port == 8123
    assert config.server.host == AppConfig().server.host
    assert config.input == AppConfig().input


def test_config_from_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "[server]\nport = 9555\n")
    monkeypatch.setenv("OCR_CONFIG", str(path))
    assert resolve_config(parse_args([])).server.port == 9555
