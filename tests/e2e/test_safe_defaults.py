"""Issue 37, items 8 and 10, and issue 49, item 2, against a real `ocr-serve`: a keyless server
bound beyond loopback refuses the jobs API (403 naming `auth.open`) and still serves OCR; CPU
workers run without the server's secrets (read from `/proc/<pid>/environ`) and under resource
limits (`/proc/<pid>/limits`); a process of the server's own uid, as a hijacked worker is, reads
no secret from any process of the server and cannot lift a worker's limits.

The keyed server runs as a non-root uid, as the image and the Kubernetes manifests run it (uid
10001): under root (CI, containers) it is started as that uid, with a Python that uid can run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests import images
from tests.e2e.conftest import ONE_WORKER, SLOW_FAKE, Server, free_port, stop_server, wait_ready
from tests.postgres import PostgresServer

CONFIG = (  # the keyed server's (a server of its own: it runs as the image's uid)
    """
[server]
host = "{host}"
log_level = "info"
"""
    + ONE_WORKER
    + """[jobs]
data_dir = "{data_dir}"
"""
)
KEY = "k-safe-defaults-0123456789"
PASSWORD = "pg-secret-in-the-url"
PNG = images.encode_png(images.latin_lines().image)


@pytest.fixture
def open_bind(server: Server) -> Server:
    """Model-free, keyless, bound to 0.0.0.0 (tests/e2e/profiles.py)."""
    return server


@pytest.mark.profile("open-bind")
def test_keyless_server_on_the_network_refuses_the_jobs_api(open_bind: Server) -> None:
    for answer in (
        httpx.get(f"{open_bind.url}/v1/jobs"),
        httpx.post(f"{open_bind.url}/v1/jobs", files=[("file", ("a.png", PNG, "image/png"))]),
        httpx.delete(f"{open_bind.url}/v1/jobs/whatever"),
    ):
        assert answer.status_code == 403, answer.text
        error = answer.json()["error"]
        assert error["code"] == "open_store_refused"
        assert "auth.open" in error["message"]
    # What stores nothing is served, and the server goes on serving.
    ocr = httpx.post(f"{open_bind.url}/v1/ocr", content=PNG, headers={"content-type": "image/png"})
    assert ocr.status_code == 200, ocr.text
    assert httpx.get(f"{open_bind.url}/livez").status_code == 200
    log = open_bind.log.read_text()
    assert "jobs API refused (403 open_store_refused)" in log
    assert "auth.open = true" in log


SERVER_UID = 10001
"""The image's uid (Dockerfile): the keyed server's when the tests run as root."""
REPOSITORY = Path(__file__).parents[2]


def _python_path() -> str:
    """The repository, then this interpreter's site-packages (not its standard library: another
    Python of the same minor version may run them)."""
    sites = [p for p in sys.path if "site-packages" in p and os.path.isdir(p)]
    return os.pathsep.join([str(REPOSITORY), *sites])


def _python_for(uid: int) -> str | None:
    """A Python `uid` can run this project with: ours, else the system's of the same version."""
    if uid == os.getuid():
        return sys.executable
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    folders = [*os.environ.get("PATH", "").split(os.pathsep), "/usr/local/bin", "/usr/bin"]
    others = [os.path.join(folder, f"python{version}") for folder in folders if folder]
    for candidate in (os.path.realpath(sys.executable), *others):
        if not os.path.isfile(candidate):
            continue
        try:
            probe = subprocess.run(
                [candidate, "-c", "import numpy, cv2, serving"],
                user=uid,
                group=uid,
                extra_groups=[],
                env={"PYTHONPATH": _python_path(), "PATH": os.environ.get("PATH", "")},
                cwd="/",
                capture_output=True,
                check=False,
            )
        except OSError:  # not even executable for it
            continue
        if probe.returncode == 0:
            return candidate
    return None


def _dead_servers_segment(folder: Path) -> Path:
    """A segment file in `folder` named as a killed server's (a pid no process has)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    segment = folder / f"ocrsrv{gone.pid}_safe-defaults-leftover"
    segment.write_bytes(b"\0" * 64)
    return segment


def _run_as(uid: int) -> dict[str, object]:
    """`subprocess` arguments that run a command as `uid`, in its own group, no other."""
    if uid == os.getuid():
        return {}
    return {"user": uid, "group": uid, "extra_groups": []}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer) -> Iterator[Server]:
    uid = SERVER_UID if os.geteuid() == 0 else os.getuid()
    python = _python_for(uid)
    if python is None:
        pytest.skip(f"no Python that uid {uid} may run (ours is under a private directory)")
    # Not under pytest's own temporary directory: only root may enter that one.
    tmp = Path(tempfile.mkdtemp(prefix="ocr-keyed-"))
    tmp.chmod(0o755)
    if uid != os.getuid():
        os.chown(tmp, uid, uid)
    store = f"{postgres.database()}&password={PASSWORD}"  # trust auth: libpq sends it unused
    config = tmp / "config.toml"
    config.write_text(CONFIG.format(host="127.0.0.1", data_dir=tmp / "jobs"))
    log = tmp_path_factory.mktemp("keyed") / "server.log"
    # A dead server's segment of this (root) process's user, as other tests leave them: the
    # keyed server's start sweeps /dev/shm and may not remove it (`test_a_server_of_another_uid_
    # leaves_roots_leftovers_and_starts`).
    leftover = _dead_servers_segment(Path("/dev/shm"))
    port = free_port()
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": _python_path(),
        "HOME": str(tmp),
        "OCR_API_KEYS": KEY,
        "OCR_JOBS__STORE": store,
        "CLOUD_TOKEN": "cloud-secret",
    }
    command = (
        "import sys; from serving.cli import main; "
        f"sys.exit(main(sys.argv[1:], backend={SLOW_FAKE!r}))"
    )
    with log.open("wb") as out:
        process = subprocess.Popen(
            [python, "-c", command, "--config", str(config), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPOSITORY,
            **_run_as(uid),  # type: ignore[arg-type]
        )
    srv = Server(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        wait_ready(srv)
        yield srv
    finally:
        stop_server(srv)
        shutil.rmtree(tmp, ignore_errors=True)
        leftover.unlink(missing_ok=True)


def _cpu_worker_pids(server: Server) -> list[int]:
    ready = httpx.get(f"{server.url}/readyz").json()  # loopback: the detail
    pids = ready["cpu_workers"]["pids"]
    assert pids, json.dumps(ready)
    return [int(pid) for pid in pids]


def _limits(pid: int) -> dict[str, str]:
    """`/proc/<pid>/limits` as name -> soft limit."""
    rows = Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]
    return {row[:26].strip(): row[26:].split()[0] for row in rows}


def test_cpu_workers_hold_no_secret(keyed: Server) -> None:
    if os.geteuid() == 0:  # only root reads the main process's environment now
        main = Path(f"/proc/{keyed.process.pid}/environ").read_bytes()
        assert KEY.encode() in main  # the test's secrets did reach the server
    for pid in _cpu_worker_pids(keyed):
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        names = {entry.partition(b"=")[0] for entry in environ.split(b"\0") if entry}
        assert KEY.encode() not in environ
        assert PASSWORD.encode() not in environ
        assert b"cloud-secret" not in environ
        assert not {name for name in names if name.startswith(b"OCR_")}, names
        assert b"PATH" in names
        assert b"OPENCV_IO_MAX_IMAGE_PIXELS" in names  # what the decoders need, kept


def test_cpu_workers_run_under_limits(keyed: Server) -> None:
    for pid in _cpu_worker_pids(keyed):
        limits = _limits(pid)
        assert limits["Max open files"] == "256"
        assert limits["Max core file size"] == "0"
        assert limits["Max address space"] != "unlimited"
        assert int(limits["Max address space"]) >= 2 << 30
        assert limits["Max cpu time"] != "unlimited"
    # Under those limits the workers still do their work.
    answer = httpx.post(
        f"{keyed.url}/v1/ocr",
        content=PNG,
        headers={"content-type": "image/png", "X-API-Key": KEY},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["pages"]


ATTACK = """
import json, resource, sys
pids, secrets = json.loads(sys.argv[1]), [s.encode() for s in json.loads(sys.argv[2])]
seen = {}
for role, pid in pids:
    found = {}
    try:
        environ = open(f"/proc/{pid}/environ", "rb").read()
        found["environ"] = [s.decode() for s in secrets if s in environ] or "no secret"
    except OSError as err:
        found["environ"] = type(err).__name__
    try:
        open(f"/proc/{pid}/mem", "rb").close()
        found["mem"] = "opened"
    except OSError as err:
        found["mem"] = type(err).__name__
    if role == "cpu worker":
        try:
            resource.prlimit(pid, resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)
            found["lift_address_space"] = "lifted"
        except (OSError, ValueError) as err:
            found["lift_address_space"] = type(err).__name__
    seen[f"{role} {pid}"] = found
print(json.dumps(seen))
"""


def _server_processes(server: Server) -> list[tuple[str, int]]:
    """Every process of the server, named by its role."""
    ready = httpx.get(f"{server.url}/readyz").json()  # loopback: the detail
    cpu = {int(pid) for pid in ready["cpu_workers"]["pids"]}
    roles = [("main", server.process.pid)]
    for child in psutil.Process(server.process.pid).children(recursive=True):
        command = " ".join(child.cmdline())
        role = "cpu worker" if child.pid in cpu else "device worker"
        if "resource_tracker" in command:
            role = "resource tracker"
        roles.append((role, child.pid))
    assert {role for role, _ in roles} >= {"main", "cpu worker", "device worker"}, roles
    return roles


def test_a_process_of_the_servers_uid_reads_no_secret_and_lifts_no_limit(keyed: Server) -> None:
    """What a CPU worker taken over through a decoder bug could do, done by a process of the
    server's uid: before, `/proc/<main>/environ` gave the API key and the PostgreSQL password,
    the device workers inherited them, and `prlimit(RLIMIT_AS, (-1, -1))` lifted a worker's
    limit (issue 49, item 2)."""
    uid = psutil.Process(keyed.process.pid).uids().real
    python = _python_for(uid)
    assert python is not None
    processes = _server_processes(keyed)
    attack = subprocess.run(
        [python, "-c", ATTACK, json.dumps(processes), json.dumps([KEY, PASSWORD, "cloud-secret"])],
        env={"PYTHONPATH": _python_path(), "PATH": os.environ.get("PATH", "")},
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
        **_run_as(uid),  # type: ignore[arg-type]
    )
    seen = json.loads(attack.stdout)
    for name, found in seen.items():
        assert found["environ"] in ("PermissionError", "no secret"), (name, found)
        if not name.startswith("resource tracker"):  # it execs: it cannot forbid it itself
            assert found["mem"] == "PermissionError", (name, found)
        if name.startswith("cpu worker"):
            assert found["lift_address_space"] == "PermissionError", (name, found)
    for pid in _cpu_worker_pids(keyed):  # soft == hard: none of them can be raised
        rows = Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]
        limits = {row[:26].strip(): row[26:].split()[:2] for row in rows}
        for name in ("Max address space", "Max open files", "Max core file size"):
            soft, hard = limits[name]
            assert soft == hard != "unlimited" or (name == "Max core file size" and soft == hard)
    assert uid == (SERVER_UID if os.geteuid() == 0 else os.getuid())  # workers: the same uid


def test_a_server_of_another_uid_leaves_roots_leftovers_and_starts() -> None:
    """Issue 47 (found by a suite run, 2026-12-07): a non-root server's start sweeps /dev/shm,
    whose sticky bit keeps another user's dead-server segments from it; the PermissionError
    escaped `Runtime.start`, and the server answered 503 to /readyz for good, logging nothing.
    The sweep, as the image's uid, in a sticky folder of its own beside a root-owned leftover:
    it keeps the file and says so."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a file of another user than the sweep's")
    python = _python_for(SERVER_UID)
    assert python is not None
    folder = Path(tempfile.mkdtemp(prefix="ocr-shm-"))
    try:
        folder.chmod(0o1777)  # as /dev/shm
        leftover = _dead_servers_segment(folder)
        swept = subprocess.run(
            [
                python,
                "-c",
                "import logging, sys; from serving.workers import shm; "
                "logging.basicConfig(level=logging.INFO); print(shm.sweep_orphans(sys.argv[1]))",
                str(folder),
            ],
            env={"PYTHONPATH": _python_path(), "PATH": os.environ.get("PATH", "")},
            cwd="/",
            capture_output=True,
            text=True,
            **_run_as(SERVER_UID),  # type: ignore[arg-type]
        )
        assert swept.returncode == 0, swept.stderr
        assert swept.stdout.strip() == "(0, 0)"
        assert "left 1 files of dead servers of other users" in swept.stderr
        assert leftover.exists()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
