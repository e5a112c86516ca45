"""The checks every section's `__post_init__` runs: a failed one is a `ConfigError` naming the
TOML path."""

from __future__ import annotations

from collections.abc import Sequence

from serving.errors import ConfigError


def check(ok: bool, path: str, problem: str) -> None:
    """Raise `ConfigError(path, problem)` unless `ok`."""
    if not ok:
        raise ConfigError(path, problem)


def choices_text(choices: Sequence[object]) -> str:
    """Choices as "a, b or c", for error messages."""
    names = [str(choice) for choice in choices]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
