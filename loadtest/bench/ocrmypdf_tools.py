"""The tools the OCRmyPDF comparison runs, each as its users run it, timed from its command's
start to its exit.

- ours: `ocr-batch --format pdf` (in process, the server's config);
- OCRmyPDF with our plugin (`--plugin serving.ocrmypdf_plugin --ocr-server URL`) against our
  server, which `OurServer` starts as `make serve` does (`python -m serving --config
  config.toml`, on a free loopback port) and keeps for the whole comparison: a server is started
  once and serves every run after, so its start-up is reported apart, not in the plugin's time;
- OCRmyPDF with Tesseract (`-l LANG`);
- the third-party PaddleOCR plugins from PyPI, each in its own venv (`plugin_venv`: made and
  installed at the pinned version on first use, as `pip install` would for their users), run as
  their READMEs say (`ocrmypdf --plugin MODULE -l LANG`).

A run that fails raises `ToolFailed` with the reason its log gives, for the table.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from loadtest.servers import ServerProcess, free_port, start


@dataclass(frozen=True, slots=True, kw_only=True)
class ThirdPartyPlugin:
    """A PaddleOCR plugin for OCRmyPDF from PyPI, pinned at the version measured."""

    package: str
    version: str
    module: str
    """What `--plugin` names (its README's command)."""


THIRD_PARTY_PLUGINS: tuple[ThirdPartyPlugin, ...] = (
    ThirdPartyPlugin(package="ocrmypdf-paddleocr", version="0.1.1", module="ocrmypdf_paddleocr"),
    ThirdPartyPlugin(package="ocrmypdf-rapidocr", version="1.0.1", module="ocrmypdf_rapidocr"),
    # a fork that keeps ocrmypdf-paddleocr's module name (its README's command)
    ThirdPartyPlugin(
        package="ocrmypdf-paddleocr-plus", version="0.2.0", module="ocrmypdf_paddleocr"
    ),
)


class ToolFailed(RuntimeError):
    """A tool made no PDF; `reason` is the line of its log that says why."""

    def __init__(self, tool: str, reason: str) -> None:
        super().__init__(f"{tool}: {reason}")
        self.reason = reason


def failure_reason(log: str, returncode: int | None = None) -> str:
    """The line of a failed run's log that says why: the last error-looking line (a Python
    exception, `ERROR`, `error:`), else the last line; with the exit status when known."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    markers = ("Error", "error:", "ERROR", "Exception", "No module named", "not found")
    reason = next(
        (line for line in reversed(lines) if any(m in line for m in markers)),
        lines[-1] if lines else "no output",
    )
    if len(reason) > 300:
        reason = reason[:297] + "..."
    return reason if returncode is None else f"exit {returncode}: {reason}"


def timed(tool: str, command: list[str], log: Path) -> float:
    """Run `command` (its output to `log`); its wall seconds.

    Raises:
        ToolFailed: it exited non-zero.
    """
    started = time.monotonic()
    with log.open("wb") as sink:
        done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        text = log.read_text(encoding="utf-8", errors="replace")
        raise ToolFailed(tool, failure_reason(text, done.returncode))
    return elapsed


def run_ours(scans: Path, out: Path, config: Path | None) -> tuple[Path, float]:
    """`ocr-batch --format pdf` on `scans`; its PDF and wall seconds."""
    batch_out = out / f"ours-{scans.stem}"
    shutil.rmtree(batch_out, ignore_errors=True)  # ocr-batch would skip the pages it has
    command = [str(Path(sys.executable).with_name("ocr-batch")), str(scans)]
    command += ["--out", str(batch_out), "--format", "pdf", "--quiet"]
    if config is not None:
        command += ["--config", str(config)]
    wall_s = timed("ours", command, out / f"ours-{scans.stem}.log")
    return batch_out / f"{scans.name}.pdf", wall_s


def run_ocrmypdf(
    name: str, python: Path, options: list[str], scans: Path, out: Path, jobs: int
) -> tuple[Path, float]:
    """`python -m ocrmypdf OPTIONS --jobs JOBS scans out/NAME-scans.pdf`; its PDF and wall
    seconds."""
    target = out / f"{name}-{scans.stem}.pdf"
    command = [str(python), "-m", "ocrmypdf", *options, "--jobs", str(jobs), str(scans)]
    command.append(str(target))
    return target, timed(name, command, out / f"{name}-{scans.stem}.log")


def plugin_venv(root: Path, plugin: ThirdPartyPlugin, log: Path) -> Path:
    """The Python of `plugin`'s own venv under `root`, made and installed at its pinned version
    if it is not there yet.

    Raises:
        ToolFailed: the venv or the install failed (the reason from pip's output).
    """
    venv = root / f"{plugin.package}-{plugin.version}"
    python = venv / "bin" / "python"
    done = venv / ".installed"
    if done.exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    timed(plugin.package, [base, "-m", "venv", "--clear", str(venv)], log)
    requirement = f"{plugin.package}=={plugin.version}"
    timed(plugin.package, [str(python), "-m", "pip", "install", requirement], log)
    done.touch()
    return python


@dataclass
class OurServer:
    """Our server as `make serve` starts it, on a free loopback port, for the plugin's runs."""

    config: Path | None
    log: Path
    server: ServerProcess | None = None
    ready_s: float | None = None

    def url(self) -> str:
        """The server's URL, started and ready on first call.

        Raises:
            ToolFailed: it did not become ready.
        """
        if self.server is None:
            port = free_port()
            argv = [sys.executable, "-m", "serving", "--port", str(port)]
            if self.config is not None:
                argv += ["--config", str(self.config)]
            self.server = start("ocr-serve", argv, port, self.log, {})
            try:
                self.ready_s = self.server.wait_ready("/readyz")
            except (RuntimeError, TimeoutError) as error:
                raise ToolFailed("ocr-serve", str(error)) from error
        return self.server.url

    def stop(self) -> None:
        """Stop it if it was started."""
        if self.server is not None:
            self.server.stop()
