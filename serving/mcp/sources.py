"""What a tool may read: a file under `[mcp] read_folders`, a URL under `[input]`'s URL rules
(`serving.http.url_fetch`), or the document itself in base64; exactly one of them."""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from serving.config import AppConfig
from serving.errors import InvalidInput, PayloadTooLarge
from serving.http import url_fetch
from serving.scheduling.memory_budget import BodyCharge


@dataclass(frozen=True, slots=True)
class Document:
    """A document a tool read, and the name it is sent under."""

    name: str
    data: bytes


def check_one(path: str | None, url: str | None, data: str | None) -> None:
    """Raises InvalidInput unless exactly one source is given."""
    given = [name for name, value in (("path", path), ("url", url), ("base64", data)) if value]
    if len(given) != 1:
        raise InvalidInput(
            f"give exactly one of path, url or base64 (got {', '.join(given) or 'none'})"
        )


async def read_source(
    config: AppConfig,
    *,
    path: str | None,
    url: str | None,
    data: str | None,
    filename: str | None,
    charge: BodyCharge | None = None,
) -> Document:
    """The document one source names.

    Raises:
        InvalidInput: not exactly one source; a path outside `mcp.read_folders` or not a
            readable file; a URL the URL rules refuse; base64 that does not decode (422).
        PayloadTooLarge: more than `server.max_body_bytes` (413).
    """
    check_one(path, url, data)
    max_bytes = config.server.max_body_bytes
    if path:
        found = await asyncio.to_thread(_allowed_file, path, config.mcp.read_folders, max_bytes)
        return Document(filename or found.name, await asyncio.to_thread(found.read_bytes))
    if url:
        if not config.input.allow_url:
            raise InvalidInput("URL inputs are disabled on this server (input.allow_url)")
        limits = url_fetch.FetchLimits(
            allowed_hosts=config.input.url_allowed_hosts,
            timeout_s=config.input.url_timeout_s,
            max_bytes=max_bytes,
        )
        fetched = await url_fetch.fetch(url, limits, charge=charge)
        name = PurePosixPath(urlsplit(url).path).name or "document"
        return Document(filename or name, fetched)
    text = data or ""
    if len(text) > 4 * (max_bytes // 3 + 1):
        raise PayloadTooLarge(f"the document is over {max_bytes} bytes (server.max_body_bytes)")
    try:
        decoded = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise InvalidInput("base64 does not decode (standard alphabet, padded)") from err
    return Document(filename or "document", decoded)


def _allowed_file(path: str, folders: tuple[str, ...], max_bytes: int) -> Path:
    """`path` resolved (links followed) when it is a regular file inside one of `folders`.

    Raises:
        InvalidInput: no folders are configured, the path is relative, outside them, or not a
            file (the answer never says whether a file outside them exists).
        PayloadTooLarge: the file is over `max_bytes`.
    """
    if not folders:
        raise InvalidInput(
            "this server reads no paths (mcp.read_folders is empty): send a URL or base64"
        )
    if not os.path.isabs(path):
        raise InvalidInput("path must be absolute")
    resolved = Path(os.path.realpath(path))
    roots = [Path(os.path.realpath(folder)) for folder in folders]
    if not any(resolved.is_relative_to(root) for root in roots):
        raise InvalidInput(f"path is outside the folders this server reads ({', '.join(folders)})")
    if not resolved.is_file():
        raise InvalidInput("path is not a file")
    size = resolved.stat().st_size
    if size > max_bytes:
        raise PayloadTooLarge(f"the file is {size} bytes, over {max_bytes} (server.max_body_bytes)")
    return resolved
