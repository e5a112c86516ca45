"""What an MCP tool may read (`serving.mcp.sources`): files only inside `mcp.read_folders` (links
resolved first), one source at a time, base64 that decodes, within the body limit."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path

import pytest

from serving.config import AppConfig, McpConfig, ServerConfig
from serving.errors import ConfigError, InvalidInput, PayloadTooLarge
from serving.mcp.sources import read_source

pytestmark = pytest.mark.unit


def _config(folder: Path, max_body_bytes: int = 1000) -> AppConfig:
    return AppConfig(
        server=ServerConfig(max_body_bytes=max_body_bytes),
        mcp=McpConfig(read_folders=(str(folder),)),
    )


def _read(config: AppConfig, **source: str) -> bytes:
    given = {"path": None, "url": None, "data": None, "filename": None, **source}
    return asyncio.run(read_source(config, **given)).data  # type: ignore[arg-type]


def test_a_file_in_a_read_folder_is_read(tmp_path: Path) -> None:
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "sub" / "a.png").write_bytes(b"png")
    assert _read(_config(tmp_path / "docs"), path=str(tmp_path / "docs" / "sub" / "a.png")) == (
        b"png"
    )


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("docs/../secret.txt", "outside the folders"),
        ("docs/link", "outside the folders"),
        ("docs", "not a file"),
        ("docs/missing.png", "not a file"),
    ],
)
def test_nothing_outside_the_read_folders(tmp_path: Path, path: str, message: str) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", tmp_path / "docs" / "link")
    with pytest.raises(InvalidInput, match=message):
        _read(_config(tmp_path / "docs"), path=str(tmp_path / path))


def test_no_read_folders_reads_no_path_and_paths_are_absolute(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="reads no paths"):
        _read(AppConfig(), path=str(tmp_path))
    with pytest.raises(InvalidInput, match="absolute"):
        _read(_config(tmp_path), path="docs/a.png")
    with pytest.raises(ConfigError, match=r"mcp\.read_folders"):
        McpConfig(read_folders=("relative/docs",))


def test_one_source_decoded_within_the_limit(tmp_path: Path) -> None:
    config = _config(tmp_path, max_body_bytes=10)
    assert _read(config, data=base64.b64encode(b"0123456789").decode()) == b"0123456789"
    with pytest.raises(PayloadTooLarge):
        _read(config, data=base64.b64encode(b"0" * 100).decode())
    with pytest.raises(InvalidInput, match="does not decode"):
        _read(config, data="a!b=")
    with pytest.raises(InvalidInput, match="exactly one"):
        _read(config, data="AAAA", url="http://example.com/a.png")
    with pytest.raises(InvalidInput, match="disabled"):
        _read(config, url="http://example.com/a.png")
