"""Which engine GPU device workers run when `[engine] gpu_backend = "auto"`: torch when it is
installed and sees a GPU, else Paddle when its GPU build is installed and sees one, else none
(the server serves on the CPU), with the reason, for the start-up log and `/readyz`.

Before "auto", the default was "paddle", and Paddle 3's GPU builds are not on PyPI: a host with
an NVIDIA GPU served on the CPU until its user found `make install-torch convert` and
`gpu_backend = "torch"` in docs/gpus.md (issue 39, item 8).

The installed distributions are read from their metadata (no import); only an engine with a
CUDA build is imported, in a child process, to count the GPUs it sees, so this process imports
no engine and a CPU host spends no start-up time on it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

AUTO = "auto"
"""The `gpu_backend` setting that asks for this choice."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineProbe:
    """What one GPU engine reports on this host."""

    name: str
    """The backend's name ("torch", "paddle")."""
    version: str | None
    """The installed distribution's version; None: not installed."""
    cuda_build: bool = False
    """Built with CUDA (torch "+cpu" or Paddle's `paddlepaddle` distribution: no)."""
    gpus: int = 0
    """CUDA devices it sees (counted only for a CUDA build)."""
    error: str = ""
    """Why the count failed, if it did."""

    def why_not(self) -> str:
        """Why this engine cannot serve the GPUs (empty when it can)."""
        if self.version is None:
            return f"{self.name} not installed"
        if not self.cuda_build:
            return f"{self.name} {self.version} is a CPU build"
        if self.error:
            return f"{self.name} {self.version} could not count GPUs ({self.error})"
        if self.gpus == 0:
            return f"{self.name} {self.version} sees no CUDA device"
        return ""


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuEngineChoice:
    """The GPU engine chosen, with why, as the log and `/readyz` ("gpu_engine") say it."""

    backend: str | None
    """"torch" or "paddle"; None: no engine can use a GPU here, the server serves on the CPU."""
    gpus: int | None
    """GPUs the chosen engine sees (0 with no backend; None: not counted here, for a configured
    backend: `serving.service.devices.visible_gpus` counts them)."""
    reason: str
    setting: str = AUTO
    """`engine.gpu_backend` as configured."""

    def describe(self) -> dict[str, object]:
        """For `/readyz`."""
        body: dict[str, object] = {"setting": self.setting, "backend": self.backend or "cpu"}
        if self.gpus is not None:
            body["gpus"] = self.gpus
        return {**body, "reason": self.reason}


def nvidia_gpus_present(driver_dir: Path = Path("/proc/driver/nvidia/gpus")) -> int:
    """NVIDIA GPUs the kernel driver lists, whatever any engine can use."""
    try:
        return sum(1 for _ in driver_dir.iterdir())
    except OSError:
        return 0


def decide(torch: EngineProbe, paddle: EngineProbe, nvidia_gpus: int) -> GpuEngineChoice:
    """torch when it sees a GPU, else Paddle when it does, else the CPU; `nvidia_gpus`: the GPUs
    the kernel driver lists, named in the reason when no engine can use them."""
    for probe in (torch, paddle):
        if not probe.why_not():
            reason = f"{probe.name} {probe.version} sees {probe.gpus} CUDA device(s)"
            if probe is paddle:
                reason += f"; {torch.why_not()}"
            return GpuEngineChoice(backend=probe.name, gpus=probe.gpus, reason=reason)
    reason = f"{torch.why_not()}; {paddle.why_not()}"
    if nvidia_gpus:
        reason += (
            f"; the kernel lists {nvidia_gpus} NVIDIA GPU(s): `make serve-gpu` installs torch's "
            "CUDA build and the models' conversions (docs/gpus.md)"
        )
    return GpuEngineChoice(backend=None, gpus=0, reason=reason)


_COUNT_CODE = {
    "torch": "import torch\nprint(torch.cuda.device_count() if torch.cuda.is_available() else 0)",
    "paddle": "import paddle\nprint(paddle.device.cuda.device_count())",
}

Runner = Callable[[str], str]
"""Runs Python code in a child process and returns its standard output."""


def run_child(code: str) -> str:
    """`code` run by this interpreter in a child process: its standard output.

    Raises:
        subprocess.SubprocessError: it failed or took over 120 s.
    """
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe(
    name: str, *, version: Callable[[str], str | None] = _version, run: Runner = run_child
) -> EngineProbe:
    """What engine `name` ("torch" or "paddle") reports here: its distribution from metadata
    (torch "+cpu" and Paddle's `paddlepaddle` are CPU builds, not imported), and the GPUs a CUDA
    build sees, counted in a child process."""
    if name == "torch":
        found = version("torch")
        cuda = found is not None and "+cpu" not in found
    else:
        gpu_build = version("paddlepaddle-gpu")
        found, cuda = gpu_build or version("paddlepaddle"), gpu_build is not None
    if found is None or not cuda:
        return EngineProbe(name=name, version=found, cuda_build=False)
    try:
        gpus = int(run(_COUNT_CODE[name]).strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as err:
        return EngineProbe(name=name, version=found, cuda_build=True, error=type(err).__name__)
    return EngineProbe(name=name, version=found, cuda_build=True, gpus=gpus)


@functools.cache
def choose_gpu_engine() -> GpuEngineChoice:
    """The choice for this host, probed once a process."""
    return decide(probe("torch"), probe("paddle"), nvidia_gpus_present())
