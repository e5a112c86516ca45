"""The built image, run with podman as a user runs it (`make image && make image-test`).

One container serves real documents through both APIs, runs as non-root, turns healthy and
drains in-flight work on SIGTERM; another keeps a batch job across `podman kill` and a restart
with its data volume. Skipped unless podman and the image (IMAGE, default ocr-serving:cpu) are
here; `make test` does not collect this folder (see the Makefile)."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pypdfium2 as pdfium
import pytest

from loadtest.accuracy import cer
from serving.convert import pdf_pages as pages
from tests import images
from tests.e2e.conftest import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("IMAGE", "ocr-serving:cpu")
PODMAN_ENV = {**os.environ, "CONTAINERS_CONF": str(REPO_ROOT / "scripts/podman/containers.conf")}
READY_TIMEOUT_S = 600.0
DRAIN_GRACE_S = 240
"""server.shutdown_grace_s for the shared container: room for two real pages on a loaded 2-core
machine, so the drain does not depend on this machine's speed (the default is 30 s)."""
MAX_CER = 0.1
"""Real pages read by the embedded mobile models; the integration tests measure a few percent."""


def podman(*args: str, check: bool = True, timeout: float = 180) -> str:
    result = subprocess.run(
        ["podman", *args], capture_output=True, text=True, env=PODMAN_ENV, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {result.stdout}{result.stderr}")
    return result.stdout.strip()


@dataclass
class Container:
    name: str
    url: str
    ready_s: float = 0.0

    def inspect(self, template: str) -> str:
        return podman("inspect", "--format", template, self.name)

    def wait_ready(self) -> float:
        """Seconds until /readyz answered 200."""
        start = time.monotonic()
        while time.monotonic() - start < READY_TIMEOUT_S:
            if self.inspect("{{.State.Running}}") != "true":
                raise AssertionError(f"container exited:\n{self.logs()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    self.ready_s = time.monotonic() - start
                    return self.ready_s
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise TimeoutError(self.logs()[-3000:])

    def logs(self) -> str:
        result = subprocess.run(
            ["podman", "logs", self.name], capture_output=True, text=True, env=PODMAN_ENV
        )
        return result.stdout + result.stderr


def run_container(*extra: str, env: dict[str, str] | None = None) -> Container:
    """`podman run` on the host network, bound to loopback on a free port, confined as
    deploy/k8s confines it: read-only root, /tmp and the home on tmpfs, no capabilities."""
    port = free_port()
    name = f"ocr-image-test-{uuid.uuid4().hex[:8]}"
    settings = {
        "OCR_SERVER__HOST": "127.0.0.1",
        "OCR_SERVER__PORT": str(port),
        "OCR_PADDLEX__VISUALIZE": "false",
        **(env or {}),
    }
    env_args = [arg for key, value in settings.items() for arg in ("-e", f"{key}={value}")]
    podman(
        "run", "-d", "--name", name, "--network=host", "--shm-size=1g",
        "--read-only", "--tmpfs", "/tmp", "--tmpfs", "/home/ocr",
        "--cap-drop=ALL", "--security-opt=no-new-privileges",
        *env_args, *extra, IMAGE,
    )  # fmt: skip
    return Container(name=name, url=f"http://127.0.0.1:{port}")


@pytest.fixture(scope="module", autouse=True)
def _image_present() -> None:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (make image installs it)")
    if subprocess.run(["podman", "image", "exists", IMAGE], env=PODMAN_ENV).returncode != 0:
        pytest.skip(f"{IMAGE} is not built (make image)")


@pytest.fixture(scope="module")
def served() -> Iterator[Container]:
    container = run_container(env={"OCR_SERVER__SHUTDOWN_GRACE_S": str(DRAIN_GRACE_S)})
    try:
        print(f"\n{IMAGE}: start to ready {container.wait_ready():.1f} s")
        yield container
    finally:
        podman("rm", "-f", "-v", "-t", "0", container.name, check=False)


@dataclass(frozen=True)
class RealDocument:
    png: bytes
    png_truth: str
    pdf: bytes
    pdf_truth: list[str]


@pytest.fixture(scope="module")
def real() -> RealDocument:
    """A page of a Debian manual as a PNG, and two of its pages as a PDF with their text layer."""
    found = pages.find_real_pdfs()
    if not found:
        pytest.fail("run scripts/system-deps.sh to install the Debian doc PDFs")
    source = found[0]
    first, second = pages.select_text_pages(source, 2)
    (image,) = pages.render_pdf_pages(source, dpi=150, first=first, count=1)
    src = pdfium.PdfDocument(source)
    doc = pdfium.PdfDocument.new()
    doc.import_pages(src, [first, second])
    out = io.BytesIO()
    doc.save(out)
    return RealDocument(
        png=images.encode_png(image),
        png_truth=pages.pdf_page_text(source, first),
        pdf=out.getvalue(),
        pdf_truth=[pages.pdf_page_text(source, i) for i in (first, second)],
    )


def _v1(container: Container, body: bytes, content_type: str) -> list[str]:
    response = httpx.post(
        f"{container.url}/v1/ocr", content=body, headers={"content-type": content_type}, timeout=300
    )
    assert response.status_code == 200, response.text
    return ["\n".join(line["text"] for line in p["lines"]) for p in response.json()["pages"]]


def _paddlex(container: Container, body: bytes, file_type: int) -> list[str]:
    request = {"file": base64.b64encode(body).decode(), "fileType": file_type}
    response = httpx.post(f"{container.url}/ocr", json=request, timeout=300)
    assert response.status_code == 200, response.text
    results = response.json()["result"]["ocrResults"]
    return ["\n".join(r["prunedResult"]["rec_texts"]) for r in results]


def test_real_page_through_both_apis(served: Container, real: RealDocument) -> None:
    for texts in (_v1(served, real.png, "image/png"), _paddlex(served, real.png, 1)):
        assert len(texts) == 1
        assert cer(real.png_truth, texts[0]) < MAX_CER, texts[0][:500]


def test_real_pdf_through_both_apis(served: Container, real: RealDocument) -> None:
    for texts in (_v1(served, real.pdf, "application/pdf"), _paddlex(served, real.pdf, 0)):
        assert len(texts) == 2
        for truth, text in zip(real.pdf_truth, texts, strict=True):
            assert cer(truth, text) < MAX_CER, text[:500]


def test_runs_as_non_root(served: Container) -> None:
    status = podman("exec", served.name, "cat", "/proc/1/status")
    uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    assert set(uids) == {"10001"}  # real, effective, saved and filesystem uid of ocr-serve
    assert podman("exec", served.name, "id", "-u") == "10001"


def test_cpu_devices_run_the_default_engine_from_build_time_conversions(served: Container) -> None:
    """The cpu image serves config.toml's default CPU engine (OpenVINO, precision "auto": bf16
    where the host's CPU has it, else f32, logged with why) on the ONNX models converted when the
    image was built: nothing is converted or downloaded at start."""
    logs = served.logs()
    for stage in ("det", "rec"):
        # The line names the file the model came from, between the model and the engine.
        pattern = (
            rf"loaded {stage} model=PP-OCRv5_mobile_{stage} "
            r"\(/opt/ocr-models/onnx/\S+\.onnx\) engine=openvino "
        )
        assert re.search(pattern, logs), logs[-3000:]
    assert re.search(r"engine=openvino [^\n]* precision=(f32|bf16) \(auto: ", logs), logs[-3000:]
    provenance = podman(
        "exec", served.name, "sh", "-c", "cat /opt/ocr-models/onnx/*/provenance.json"
    )
    assert provenance.count('"converter"') >= 2


def test_healthcheck_turns_healthy(served: Container) -> None:
    assert json.loads(served.inspect("{{json .Config.Healthcheck.Test}}")) == [
        "CMD", "python", "-m", "serving.healthcheck",
    ]  # fmt: skip
    # podman runs HEALTHCHECK from a systemd timer; here, where there is none, on demand.
    podman("healthcheck", "run", served.name)
    assert served.inspect("{{.State.Health.Status}}") == "healthy"


def test_sigterm_drains_in_flight_requests(served: Container, real: RealDocument) -> None:
    """Last in the module: it stops the shared container."""
    answer: dict[str, httpx.Response] = {}

    def post() -> None:
        answer["pdf"] = httpx.post(
            f"{served.url}/v1/ocr",
            content=real.pdf,
            headers={"content-type": "application/pdf"},
            timeout=300,
        )

    client = threading.Thread(target=post)
    client.start()
    deadline = time.monotonic() + 60
    while "ocr_pages_inflight 2.0" not in httpx.get(f"{served.url}/metrics").text:
        assert time.monotonic() < deadline, "the PDF's pages never went in flight"
        time.sleep(0.05)
    stopping = time.monotonic()
    # SIGTERM, and SIGKILL only if the server is still there after its grace and a margin.
    podman("stop", "-t", str(DRAIN_GRACE_S + 30), served.name, timeout=DRAIN_GRACE_S + 60)
    print(f"\nSIGTERM to exit with 2 real pages in flight: {time.monotonic() - stopping:.1f} s")
    client.join(timeout=60)
    response = answer["pdf"]
    assert response.status_code == 200, response.text
    assert len(response.json()["pages"]) == 2
    assert served.inspect("{{.State.ExitCode}}") == "0"
    assert "shutting down" in served.logs().lower()


def test_job_survives_kill_and_restart_with_its_volume(real: RealDocument) -> None:
    volume = f"ocr-image-test-{uuid.uuid4().hex[:8]}"
    podman("volume", "create", volume)
    # One job page at a time, so the kill lands between pages with some done and some not.
    container = run_container(
        "-v", f"{volume}:/var/lib/ocr", env={"OCR_JOBS__MAX_INFLIGHT_PAGES": "1"}
    )
    try:
        container.wait_ready()
        files = [("file", (f"{n}.pdf", real.pdf, "application/pdf")) for n in ("a", "b")]
        submitted = httpx.post(f"{container.url}/v1/jobs", files=files, timeout=60)
        assert submitted.status_code == 202, submitted.text
        job = submitted.json()["id"]
        deadline = time.monotonic() + 300
        while httpx.get(f"{container.url}/v1/jobs/{job}").json()["pages_done"] < 1:
            assert time.monotonic() < deadline, "no job page finished"
            time.sleep(0.2)
        podman("kill", container.name)  # SIGKILL: no shutdown, pages left running
        podman("wait", container.name)
        podman("start", container.name)  # the same container, its volume, its port
        container.wait_ready()
        with httpx.stream("GET", f"{container.url}/v1/jobs/{job}/results", timeout=600) as r:
            lines = [json.loads(line) for line in r.iter_lines() if line]
        status = httpx.get(f"{container.url}/v1/jobs/{job}").json()
        assert status["status"] == "succeeded"
        assert (status["pages_done"], status["pages_failed"]) == (4, 0)
        keys = sorted((line["file_index"], line["page"]) for line in lines)
        assert keys == [(f, p) for f in (0, 1) for p in (0, 1)]  # every page, once
        for line in lines:
            text = "\n".join(t["text"] for t in line["lines"])
            assert cer(real.pdf_truth[line["page"]], text) < MAX_CER
        assert "pages left running set back to pending" in container.logs()
    finally:
        podman("rm", "-f", "-v", "-t", "0", container.name, check=False)
        podman("volume", "rm", "-f", volume, check=False)
