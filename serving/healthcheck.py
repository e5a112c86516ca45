"""`python -m serving.healthcheck`: exit 0 when this machine's server answers `/readyz` with 200.

The container's HEALTHCHECK runs it. It reads the configuration as `ocr-serve` does (`OCR_CONFIG`
and the `OCR_*` overrides), so it asks the port the server answers probes on (`server.health_port`,
else `server.port`), with the standard library only (the image needs no curl).
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from serving.config import load_config
from serving.errors import ConfigError

_ANY_ADDRESS = ("0.0.0.0", "::", "")


def readyz_url(host: str, port: int) -> str:
    """Where to ask: loopback when the server binds every address."""
    if host in _ANY_ADDRESS:
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/readyz"


def main() -> int:
    """0 when ready, 1 otherwise (not ready, not answering, or a bad configuration)."""
    path = os.environ.get("OCR_CONFIG")
    try:
        config = load_config(Path(path) if path else None, os.environ)
    except ConfigError as err:
        print(f"healthcheck: configuration error: {err}", file=sys.stderr)  # noqa: T201
        return 1
    url = readyz_url(config.server.host, config.server.health_port or config.server.port)
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return 0 if response.status == 200 else 1
    except (urllib.error.URLError, OSError) as err:
        print(f"healthcheck: {url}: {err}", file=sys.stderr)  # noqa: T201
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
