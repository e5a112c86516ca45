"""A benchmark scenario of `ocr-bench`: its name, help, own arguments and run method.

Each experiment is a subclass registered under its name (`register`), as vLLM's `vllm bench
<type>`: the harness (`loadtest.bench.cli`) builds one parser with the shared options each
scenario asks for (`loadtest.bench.options`), adds the scenario's own, calls `run` and writes
what it returns in the one results format (`loadtest.bench.results`) under the one report
header (`loadtest.bench.header`). The loops scenarios share are in `loadtest.bench.common`.
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from typing import Any, ClassVar, TypeVar

from loadtest.bench.results import Results

__all__ = ["SCENARIOS", "Scenario", "register"]


class Scenario(ABC):
    """One experiment. Subclasses set the class attributes and implement `run`."""

    name: ClassVar[str]
    """The sub-command: `ocr-bench <name>`."""
    help: ClassVar[str]
    """One line for `ocr-bench --help`; the module's docstring is the scenario's long help."""
    shared: ClassVar[tuple[str, ...]] = ("out", "pages", "dpi")
    """The shared options it reads (`loadtest.bench.options.SHARED`), and no others."""
    defaults: ClassVar[dict[str, Any]] = {}
    """Its own defaults of shared options (`{"pages": 12}`)."""
    servers: ClassVar[tuple[str, ...]] = ()
    """What `--servers` may name (the rows it can run), where it takes `servers`."""
    precisions: ClassVar[tuple[str, ...]] = ("auto", "f32", "bf16", "int8")
    """What `--precision` may name, where it takes `precision`."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:  # noqa: B027
        """Add the scenario's own options (none by default)."""

    @abstractmethod
    def run(self, args: argparse.Namespace) -> Results:
        """Measure, with the parsed shared and own options; `args.out` exists."""


SCENARIOS: dict[str, type[Scenario]] = {}
"""Every registered scenario by name, in registration order."""

_S = TypeVar("_S", bound=type[Scenario])


def register(cls: _S) -> _S:
    """Class decorator: make `cls` a sub-command of `ocr-bench`.

    Raises:
        ValueError: another scenario has its name.
    """
    if cls.name in SCENARIOS and SCENARIOS[cls.name] is not cls:
        raise ValueError(f"two scenarios named {cls.name!r}")
    SCENARIOS[cls.name] = cls
    return cls
