"""`[mcp]`: the Model Context Protocol server at `/mcp` (docs/mcp.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from serving.config.checks import check


@dataclass(frozen=True, slots=True, kw_only=True)
class McpConfig:
    """OCR as tools for agents: `/mcp` (streamable HTTP) on the server, and `ocr-mcp` (stdio)."""

    enabled: bool = False
    """Serve `/mcp`, with the same API keys, limits and tenants as `/v1` (needs the `mcp`
    extra)."""
    read_folders: tuple[str, ...] = ()
    """Absolute folders on the server whose files the tools may read by path (their
    sub-folders too, links resolved first); empty: no path is read, send a URL or base64."""

    def __post_init__(self) -> None:
        check(
            all(os.path.isabs(folder) for folder in self.read_folders),
            "mcp.read_folders",
            "must be absolute paths",
        )
