"""`python -m loadtest.engine_limit` reads its engine settings as the server does."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest import engine_limit
from serving.config import AppConfig

pytestmark = pytest.mark.unit


class _Loaded(Exception):
    """Stops `main` where the engine would load its models."""


def _config_of(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> AppConfig:
    seen: list[AppConfig] = []

    class Engine:
        def __init__(self, config: AppConfig) -> None:
            seen.append(config)

        def load(self) -> None:
            raise _Loaded

    monkeypatch.setattr(engine_limit, "LocalEngine", Engine)
    with pytest.raises(_Loaded):
        engine_limit.main(argv)
    return seen[0]


def test_the_environment_overrides_the_config_file_and_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[engine]\ncpu_threads = 3\ncpu_backend = "paddle"\n')
    argv = ["--config", str(config)]
    monkeypatch.delenv("OCR_ENGINE__CPU_THREADS", raising=False)
    assert _config_of(argv, monkeypatch).engine.cpu_threads == 3
    monkeypatch.setenv("OCR_ENGINE__CPU_THREADS", "5")
    read = _config_of(argv, monkeypatch)
    assert (read.engine.cpu_threads, read.engine.cpu_backend) == (5, "paddle")
    assert _config_of([], monkeypatch).engine.cpu_threads == 5  # over the defaults too
