"""`ocr-batch --ray` on a local Ray: the server's texts, resumes without redoing pages, survives a
model actor killed mid-run, and the CLI's summary.

One local Ray for the file (`local_ray`), which the CLI joins too (issue 47: a Ray start is
about 7 s and its worker processes, kept for the next run, import the pipeline once): the file's
tests are one xdist group, the `default` profile's, whose server the first test reads beside
Ray; it takes that server through `profile_server`, so that pytest leaves the file's tests
together rather than among the profile's others."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import cv2
import httpx
import psutil
import pyarrow.parquet
import pytest
import ray

from loadtest.engine_limit import real_page_set
from serving.batch.manifest import MANIFEST, PageKey
from serving.batch.ray_driver import ActorPools, run_on_ray
from tests import images
from tests.e2e.conftest import Server, profile_group

pytestmark = pytest.mark.xdist_group(profile_group("default"))

# Two cores: a det and a rec actor, and their CPU tasks, all fit at once.
POOLS = ActorPools(cpus_per_actor=0.5, cpus_per_task=0.5)


PAGES_KILLED_RUN = 8
"""Pages of the run whose model actor is killed: enough that actors still run when the first
pages reach the driver."""


class Interrupted(Exception):
    """Stands for Ctrl-C or a lost driver after some pages were written."""


@pytest.fixture(scope="module")
def local_ray() -> Iterator[str]:
    """A Ray of the file's own (`"local"`, even where a `ray start` cluster runs on the
    machine); its address, for a driver of another process to join."""
    ray.init("local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real page (a Debian manual's, as the bench renders it) and a two-page PDF: one real
    page, not two (2026-12-07): each page costs each of the three runs below ~2.5 s of Ray's
    1-thread actors, on a machine the suite's other worker shares."""
    folder = tmp_path_factory.mktemp("ray-in")
    for label, image, _ in real_page_set(1, dpi=100.0):
        cv2.imwrite(str(folder / f"{label}.png"), image)
    latin, chinese = images.latin_lines(), images.chinese_lines()
    (folder / "lines.pdf").write_bytes(images.make_pdf([latin.image, chinese.image], dpi=144.0))
    return folder


def _server_records(server: Server, folder: Path) -> dict[tuple[str, int], dict]:
    """`/v1/ocr`'s answer for every document in `folder`, by (file, page)."""
    answers = {}
    for path in sorted(folder.iterdir()):
        kind = "application/pdf" if path.suffix == ".pdf" else "image/png"
        response = httpx.post(
            f"{server.url}/v1/ocr",
            content=path.read_bytes(),
            headers={"content-type": kind},
            timeout=300,
        )
        assert response.status_code == 200, response.text
        for page in response.json()["pages"]:
            answers[(path.name, page["page"])] = page
    return answers


def _manifest_keys(out: Path) -> list[PageKey]:
    lines = (out / MANIFEST).read_text().splitlines()
    return [(e["sha256"], e["page"]) for e in map(json.loads, lines)]


@pytest.mark.profile("default")
def test_texts_equal_the_servers_and_a_rerun_does_only_what_is_left(
    tmp_path: Path, profile_server: Callable[[str], Server], documents: Path, local_ray: str
) -> None:
    server = profile_server("default")
    out = tmp_path / "out"

    def interrupt(key: PageKey, ok: bool) -> None:
        raise Interrupted(key)

    with pytest.raises(Interrupted):
        run_on_ray([str(documents)], out, pools=POOLS, on_page=interrupt)
    first = _manifest_keys(out)
    assert len(first) == 1  # the page that reached the driver is on disk, nothing else

    summary = run_on_ray([str(documents)], out, pools=POOLS)
    assert summary.pages == 3
    assert summary.skipped == 1
    assert summary.failures == {}
    assert set(summary.done).isdisjoint(first)
    assert len(summary.done) == 2
    assert sorted(_manifest_keys(out)) == sorted(first + summary.done)  # no page twice

    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 3
    expected = _server_records(server, documents)
    assert sorted(expected) == sorted((r["file"], r["page"]) for r in records)
    for record in records:
        answer = expected[(record["file"], record["page"])]
        assert [ln["text"] for ln in record["lines"]] == [ln["text"] for ln in answer["lines"]]
        assert [ln["box"] for ln in record["lines"]] == [ln["box"] for ln in answer["lines"]]
        assert (record["width"], record["height"]) == (answer["width"], answer["height"])
    assert sum(len(r["lines"]) for r in records) > 30  # a real page: many lines

    table = pyarrow.parquet.read_table(out / "results.parquet").to_pylist()
    assert [(r["file"], r["page"], r["lines"]) for r in table] == [
        (r["file"], r["page"], r["lines"]) for r in records
    ]

    again = run_on_ray([str(documents)], out, pools=POOLS)
    assert (again.done, again.skipped, again.written) == ([], 3, [])


def _model_actor_pids() -> list[int]:
    """Processes of this session's Ray Data model actors (children of our own Ray)."""
    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if any("ModelActor" in part for part in (p.info["cmdline"] or []))
    ]


def test_a_model_actor_killed_mid_run_costs_no_page(tmp_path: Path, local_ray: str) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    latin = images.latin_lines()
    for i in range(PAGES_KILLED_RUN):  # a file a page, all the same page
        (folder / f"p{i}.png").write_bytes(images.encode_png(latin.image[:, i:]))
    out = tmp_path / "out"
    killed: list[int] = []
    earlier = set(_model_actor_pids())  # an earlier run's actors, still on their way out

    def kill_once(key: PageKey, ok: bool) -> None:
        # At the first page that reaches the driver while a model actor of this run still runs:
        # on a busy machine Ray may have read every page, and let its actors go, before the
        # first arrives.
        if not killed and (pids := [p for p in _model_actor_pids() if p not in earlier]):
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    summary = run_on_ray([str(folder)], out, pools=POOLS, on_page=kill_once)
    assert killed, "no model actor ran when a page reached the driver"
    assert summary.failures == {}
    assert len(summary.done) == PAGES_KILLED_RUN
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all([ln["text"] for ln in r["lines"]] == latin.lines for r in records)


def test_cli_runs_on_a_local_ray_and_reports(tmp_path: Path, local_ray: str) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    latin = images.latin_lines()
    (folder / "latin.png").write_bytes(images.encode_png(latin.image))
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "serving.batch.cli",
        "--ray",
        str(folder),  # `--ray` before the inputs: the folder is not taken for an address
        "--out",
        str(out),
        "--cpus-per-actor",
        "0.5",
        "--cpus-per-task",
        "0.5",
        "--format",
        "pdf",
    ]
    env = {**os.environ, "RAY_ADDRESS": local_ray}  # the file's Ray, whatever else runs here
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 documents, 1 pages: 1 to do, 0 skipped" in done.stdout
    assert "1 pages done now" in done.stdout
    assert "pages/s" in done.stdout
    (entry,) = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [ln["text"] for ln in entry["record"]["lines"]] == latin.lines
    assert all(ln["words"] for ln in entry["record"]["lines"])
    # `--format pdf` as in process: a searchable PDF of the input, which poppler reads back.
    text = subprocess.run(
        ["pdftotext", str(out / "latin.png.pdf"), "-"], capture_output=True, text=True, check=True
    )
    assert [line for line in text.stdout.splitlines() if line.strip()] == latin.lines
