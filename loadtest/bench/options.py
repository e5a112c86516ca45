"""The options every `ocr-bench` scenario shares, defined once.

A scenario names the ones it reads (`Scenario.shared`) and may change their defaults
(`Scenario.defaults`); `add_shared` adds exactly those to its sub-command, so `--pages` means the
same thing, is checked the same way and is spelled the same in every scenario, and a scenario
never silently ignores one it does not read (argparse refuses it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SHARED", "SharedOption", "add_shared", "comma_list", "count", "positive_ints"]


def count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from err
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from err
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def positive_ints(text: str) -> list[int]:
    """An argparse type: "1,4" -> [1, 4], each at least 1."""
    values = [count(1)(part) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError("give at least one value")
    return values


def comma_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: "a,b" -> ["a", "b"], each one of `choices`; "" -> []."""

    def parse(text: str) -> list[str]:
        values = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [v for v in values if v not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(unknown)}: choose from {', '.join(choices)}"
            )
        return values

    return parse


@dataclass(frozen=True, slots=True)
class SharedOption:
    """One shared option: its flag, argparse keywords and default."""

    flag: str
    default: Any
    help: str
    kwargs: dict[str, Any] = field(default_factory=dict)


SHARED: dict[str, SharedOption] = {
    "out": SharedOption(
        "--out",
        None,
        "folder of the results and work files (default bench-out/<scenario>)",
        {"type": Path},
    ),
    "pages": SharedOption(
        "--pages",
        8,
        "real document pages (Debian's manuals, their text layers the truth)",
        {"type": count(1)},
    ),
    "dpi": SharedOption(
        "--dpi", 150.0, "resolution the pages are rendered at", {"type": _positive_float}
    ),
    "threads": SharedOption(
        "--threads",
        0,
        "CPU threads of each engine; 0 = the server's own rule (the cores "
        "shared among its device workers), or the cores in process",
        {"type": count(0)},
    ),
    "servers": SharedOption("--servers", None, "the rows to run, comma-separated"),
    "precision": SharedOption(
        "--precision",
        None,
        "OpenVINO precisions to run ([engine] openvino_precision), comma-separated",
    ),
    "repeats": SharedOption(
        "--repeats",
        1,
        "times through the pages (or timed repeats), least or median kept",
        {"type": count(1)},
    ),
    "levels": SharedOption(
        "--levels",
        [1, 4],
        "closed-loop concurrency levels, comma-separated",
        {"type": positive_ints},
    ),
    "requests": SharedOption(
        "--requests",
        0,
        "requests per level; 0 = the scenario's own: a round of the pages, or two",
        {"type": count(0)},
    ),
    "max_time_s": SharedOption(
        "--max-time-s", 900.0, "bound on each level's seconds", {"type": _positive_float}
    ),
}
"""Every shared option by its `args` name."""


def add_shared(
    parser: argparse.ArgumentParser,
    names: Sequence[str],
    defaults: dict[str, Any],
    *,
    servers: Sequence[str] = (),
    precisions: Sequence[str] = (),
) -> None:
    """Add the shared options `names` to `parser`, with a scenario's `defaults` over the shared
    ones; `servers` and `precisions` are what `--servers` and `--precision` may name (every one
    of them by default).

    Raises:
        KeyError: a name that is not a shared option.
    """
    group = parser.add_argument_group("shared options")
    for name in names:
        option = SHARED[name]
        default = defaults.get(name, option.default)
        kwargs = dict(option.kwargs)
        text = option.help
        if name == "servers":
            kwargs["type"] = comma_list(servers)
            default = defaults.get(name, list(servers))
            text += f"; of {', '.join(servers)}"
        elif name == "precision":
            kwargs["type"] = comma_list(precisions)
            default = defaults.get(name, list(precisions))
            text += f"; of {', '.join(precisions)}"
        if isinstance(default, list):
            shown = ",".join(str(v) for v in default)
        else:
            shown = "" if default is None else str(default)
        if shown:
            text += f" (default {shown})"
        group.add_argument(option.flag, dest=name, default=default, help=text, **kwargs)
