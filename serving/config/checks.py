"""The checks every section's `__post_init__` runs: a failed one is a `ConfigError` naming the
TOML path."""

from __future__ import annotations

from serving.errors import ConfigError


def check(ok: bool, path: str, problem: str) -> None:
    """Raise `ConfigError(path, problem)` unless `ok`."""
    if not ok:
        raise ConfigError(path, problem)
