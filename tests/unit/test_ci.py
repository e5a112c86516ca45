"""`.ci/run`, the README's test path on every submission: `make test`, then the container image
built and tested where the machine can build images (issue 39: nothing ran tests/image, and the
image's own test had failed unseen). Run with `make`, `id` and `podman` stubbed on PATH."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_ci(tmp_path: Path, *, uid: int, env: dict[str, str] | None = None) -> tuple[list[str], str]:
    """`.ci/run` with stubs: the make targets it ran, and what it printed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "make-calls"
    stubs = {
        "make": f'echo "$*" >> {calls}',
        "id": f"echo {uid}",
        "podman": "exit 0",
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    result = subprocess.run(
        ["bash", str(REPO_ROOT / ".ci/run")],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    made = calls.read_text().splitlines() if calls.exists() else []
    return made, result.stdout + result.stderr


def test_ci_builds_and_tests_the_image_as_root(tmp_path: Path) -> None:
    made, out = run_ci(tmp_path, uid=0)
    assert made == ["test", "image", "image-test"]
    assert "image built and tested in" in out


def test_ci_says_why_it_skips_the_image(tmp_path: Path) -> None:
    made, out = run_ci(tmp_path, uid=1000)
    assert made == ["test"]
    assert ".ci/run: skipping the container image: not root" in out


def test_ci_skips_the_image_when_told(tmp_path: Path) -> None:
    made, out = run_ci(tmp_path, uid=0, env={"OCR_CI_IMAGE": "0"})
    assert made == ["test"]
    assert "skipping the container image: OCR_CI_IMAGE=0" in out


def test_ci_fails_when_the_image_is_required_but_cannot_be_built(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="cannot build the image: not root"):
        run_ci(tmp_path, uid=1000, env={"OCR_CI_IMAGE": "1"})
