"""Unit tests for the `OCR_*` environment overrides (serving/config/loading.py) and their
precedence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from serving.cli import parse_args, resolve_config
from serving.config import (
    AppConfig,
    StageLimits,
    apply_env_overrides,
    env_value,
    load_config,
    with_paths_resolved,
)
from serving.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("9000", 9000),
        ("2.5", 2.5),
        ("true", True),
        ("false", False),
        ('["gpu:0", "cpu"]', ["gpu:0", "cpu"]),
        ('"quoted"', "quoted"),
        ("{ max_batch_size = 2, max_cost = 9 }", {"max_batch_size": 2, "max_cost": 9}),
        ("0.0.0.0", "0.0.0.0"),
        ("debug", "debug"),
        ("json", "json"),
        ("", ""),
        ("embedded:PP-OCRv5_mobile_det", "embedded:PP-OCRv5_mobile_det"),
        ("/models/det", "/models/det"),
        ("1\nx = 2", "1\nx = 2"),
    ],
)
def test_values_are_toml_else_strings(text: str, value: object) -> None:
    assert env_value(text) == value


def test_overrides_are_applied_on_a_copy() -> None:
    raw = {"server": {"port": 8000, "host": "127.0.0.1"}}
    env = {
        "OCR_SERVER__PORT": "9000",
        "OCR_WORKERS__DEVICES": '["gpu:0","cpu"]',
        "OCR_ENGINE__USE_TENSORRT": "true",
        "OCR_WORKERS__CPU__DET__MAX_BATCH_SIZE": "2",
        "OCR_CONFIG": "/etc/ocr/config.toml",
        "OCR_SOMETHING": "not an override",
        "PATH": "/usr/bin",
    }
    merged = apply_env_overrides(raw, env)
    assert merged == {
        "server": {"port": 9000, "host": "127.0.0.1"},
        "workers": {"devices": ["gpu:0", "cpu"], "cpu": {"det": {"max_batch_size": 2}}},
        "engine": {"use_tensorrt": True},
    }
    assert raw == {"server": {"port": 8000, "host": "127.0.0.1"}}


def test_env_builds_a_config_and_keeps_other_defaults() -> None:
    env = {
        "OCR_SERVER__PORT": "9000",
        "OCR_SERVER__HOST": "0.0.0.0",
        "OCR_SERVER__LOG_FORMAT": "json",
        "OCR_WORKERS__DEVICES": '["gpu:0", "cpu"]',
        "OCR_ENGINE__USE_TENSORRT": "true",
        "OCR_WORKERS__GPU__REC__MAX_BATCH_SIZE": "48",
        "OCR_JOBS__DATA_DIR": "/var/lib/ocr/jobs",
    }
    config = load_config(None, env)
    assert config.server.port == 9000
    assert config.server.host == "0.0.0.0"
    assert config.server.log_format == "json"
    assert config.workers.devices == ("gpu:0", "cpu")
    assert config.engine.use_tensorrt is True
    # A partial table keeps the GPU defaults of the keys it leaves out.
    assert config.workers.gpu.rec == StageLimits(max_batch_size=48, max_cost=96 * 1600)
    assert config.jobs.data_dir == "/var/lib/ocr/jobs"
    assert config.pipeline == AppConfig().pipeline


def test_env_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[server]\nport = 8100\nlog_level = "debug"\n[workers]\ndevices = "cpu"\n')
    config = load_config(path, {"OCR_SERVER__PORT": "8200"})
    assert config.server.port == 8200
    assert config.server.log_level == "debug"
    assert config.workers.devices == ("cpu",)


def test_repo_config_with_the_image_environment() -> None:
    env = {"OCR_CONFIG": "/etc/ocr/config.toml", "OCR_SERVER__HOST": "0.0.0.0"}
    config = load_config(REPO_ROOT / "config.toml", env)
    assert config.server.host == "0.0.0.0"
    assert config.server.port == 8000


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[server]\nport = 8100\nhost = "127.0.0.2"\nlog_level = "warning"\n')
    env = {"OCR_SERVER__PORT": "8200", "OCR_SERVER__LOG_LEVEL": "debug"}
    args = parse_args(["--config", str(path), "--port", "8300"])
    config = resolve_config(args, env)
    assert config.server.port == 8300  # flag
    assert config.server.log_level == "debug"  # environment
    assert config.server.host == "127.0.0.2"  # file
    assert config.server.max_inflight_pages == 64  # default


def test_ocr_config_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[server]\nport = 8100\n")
    monkeypatch.setenv("OCR_CONFIG", str(path))
    monkeypatch.setenv("OCR_SERVER__RETRY_AFTER_S", "7")
    config = resolve_config(parse_args([]))
    assert config.server.port == 8100
    assert config.server.retry_after_s == 7


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OCR_SERVER__PROT": "1"}, "server.prot: unknown key"),
        ({"OCR_SERVR__PORT": "1"}, "servr: unknown key"),
        ({"OCR_WORKERS__Rec_QUEUE__MAX_WAIT": "1"}, "workers.rec_queue.max_wait: unknown key"),
        ({"OCR_SERVER__PORT": "abc"}, "server.port: must be int, got str"),
        ({"OCR_SERVER__PORT": "0"}, "server.port: must be 1..65535"),
        ({"OCR_SERVER__LOG_FORMAT": "xml"}, "server.log_format: must be text or json"),
        ({"OCR_ENGINE__USE_TENSORRT": "yes"}, "engine.use_tensorrt: must be bool, got str"),
        ({"OCR_WORKERS__DEVICES": '["tpu:0"]'}, "workers.devices: unknown device 'tpu:0'"),
        ({"OCR_SERVER__PORT__X": "1"}, "server.port: must be int, got dict"),
        ({"OCR_SERVER____PORT": "1"}, "empty key"),
    ],
)
def test_bad_overrides_are_refused_with_their_path(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, env)


def test_a_key_inside_a_value_is_refused() -> None:
    with pytest.raises(ConfigError, match=re.escape("server.port: is not a table")):
        apply_env_overrides({"server": {"port": 8000}}, {"OCR_SERVER__PORT__X": "1"})


def test_no_environment_means_no_overrides() -> None:
    defaults = with_paths_resolved(AppConfig(), REPO_ROOT)
    assert load_config(REPO_ROOT / "config.toml", None) == defaults
    assert load_config(REPO_ROOT / "config.toml", {}) == defaults
