"""`ocr-serve` started as a subprocess on a free port, with the real embedded models.

Tests share servers by profile (tests/e2e/profiles.py): a test takes `server` and names its
profile with `@pytest.mark.profile("name")` (or a file's `pytestmark`); `profile_server(name)`
gives a second one a test names. A test that kills, freezes or exhausts its server, or watches
it start, starts its own with `fresh_server`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from serving.workers import shm
from tests.e2e.profiles import (
    CONFIG,
    DEFAULT,
    ONE_SET,
    ONE_WORKER,
    PROFILES,
    SLOW_FAKE,
    Profile,
    check_names,
)

__all__ = ["CONFIG", "ONE_SET", "ONE_WORKER", "SLOW_FAKE"]

REPO_ROOT = Path(__file__).resolve().parents[2]
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
"""This process's pytest-xdist worker (`gw0`, ...); empty on one process."""


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    readiness: list[int] = field(default_factory=list)
    """The `/readyz` statuses seen while it started (a profile's server; `wait_ready`'s)."""
    data_dir: Path = Path()
    """`{dir}/data` of its folder: where profiles keep their jobs (`jobs.data_dir`)."""
    env: dict[str, str] = field(default_factory=dict)
    """The whole environment it was started with."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@functools.cache
def precision_checked(environ: tuple[tuple[str, str], ...]) -> None:
    """This CPU's precision check for the default config's model sets, measured once, before the
    first real-model server, by `python -m serving.engine.precision_ahead` (a process of its
    own: the check's models leave with it), its verdicts cached in the project's
    `var/precision`, where every server started here reads them: a cold check of both sets in a
    worker took past the 600 s start-up limit on this 2-core machine shared with other work
    (issue 46). Nothing to do where the environment forces a precision that needs no check."""
    subprocess.run(
        [sys.executable, "-m", "serving.engine.precision_ahead"],
        env=dict(environ),
        cwd=Path(__file__).parents[2],
        stdout=subprocess.DEVNULL,
        check=True,
    )


def start_server(
    tmp: Path,
    config: str = CONFIG,
    *,
    backend: str | None = None,
    env: dict[str, str] | None = None,
    launch: str = "",
) -> Server:
    """`ocr-serve --config tmp/config.toml` on a free port, started, not waited for. `launch`:
    Python statements run in the server's process before `serving.cli.main` (a test hook).
    Tests call it as `fresh_server`, or get a profile's server (`server`)."""
    if backend is None:
        precision_checked(tuple(sorted({**os.environ, **(env or {})}.items())))
    config_path = tmp / "config.toml"
    config_path.write_text(config)
    port = free_port()
    log = tmp / "server.log"
    command = [sys.executable, "-m", "serving"]
    if backend is not None or launch:  # `ocr-serve` itself, on another engine backend
        command = [
            sys.executable,
            "-c",
            f"import sys; {launch or 'pass'}; from serving.cli import main; "
            f"sys.exit(main(sys.argv[1:], backend={backend!r}))",
        ]
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log.open("wb") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [*command, "--config", str(config_path), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=REPO_ROOT,  # the repository: `tests.fakes` imports
        )
    return Server(
        url=f"http://127.0.0.1:{port}",
        process=process,
        log=log,
        data_dir=tmp / "data",
        env=environment,
    )


fresh_server = start_server
"""A server of the test's own, started, not yet ready (`wait_ready`, then `stop_server`): for a
test that kills, freezes or exhausts it, or watches it start. Everything else names a profile."""


def start_image(tmp: Path, config: str, env: dict[str, str]) -> Server:
    """`ocr-serve` started as the container image starts it (Dockerfile's CMD): no flags, from
    `tmp`, its config named by OCR_CONFIG, every setting else from `OCR_*` variables (the test
    run's own left out); `{dir}` and `{port}` in `env` are filled in."""
    port = free_port()
    etc = tmp / "etc-ocr"
    etc.mkdir()
    (etc / "config.toml").write_text(config)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCR_")}
    environment["OCR_CONFIG"] = str(etc / "config.toml")
    environment.update(
        {k: v.replace("{dir}", str(tmp)).replace("{port}", str(port)) for k, v in env.items()}
    )
    precision_checked(tuple(sorted(environment.items())))  # a hit where `env` names the cache
    log = tmp / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "ocr-serve")],  # the image's CMD
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=tmp,
        )
    return Server(
        url=f"http://127.0.0.1:{port}",
        process=process,
        log=log,
        data_dir=tmp / "data",
        env=environment,
    )


@contextlib.contextmanager
def serving(tmp: Path, config: str = CONFIG, **kwargs: Any) -> Iterator[Server]:
    """`start_server(tmp, config, **kwargs)`, ready (`wait_ready`), stopped on the way out."""
    srv = start_server(tmp, config, **kwargs)
    try:
        wait_ready(srv)
        yield srv
    finally:
        stop_server(srv)


fresh_serving = serving
"""`fresh_server` ready, stopped on the way out: a server of the test's own, for a test that
exhausts it, or whose config names what the test starts first (a receiver's URL, an object
store's credentials, a database of its own)."""


def wait_ready(server: Server, timeout_s: float = 300.0) -> list[int]:
    """Wait for /readyz; returns the status codes seen on the way. One client for all the polls:
    `httpx.get` makes a client, and an SSL context, each call (~25 ms of CPU, beside a server
    that is starting)."""
    seen = []
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5) as client:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise RuntimeError(f"ocr-serve exited:\n{server.log.read_text()[-3000:]}")
            try:
                status = client.get(f"{server.url}/readyz").status_code
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            seen.append(status)
            if status == 200:
                return seen
            time.sleep(0.2)
    raise TimeoutError(server.log.read_text()[-3000:])


def stop_server(server: Server) -> int:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            return server.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.process.kill()
    return server.process.wait()


def kill_leftovers(server: Server, children: list[psutil.Process]) -> None:
    """Stop what a kill -9 of the main process leaves: its workers and shared memory."""
    if server.process.poll() is None:
        server.process.kill()
        server.process.wait(timeout=30)
    # Workers exit when their parent's pipes close; the resource tracker then unlinks the pool's
    # semaphores, so it is left to finish.
    _gone, alive = psutil.wait_procs(children, timeout=15)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            if "resource_tracker" not in " ".join(proc.cmdline()):
                proc.kill()
    _gone, alive = psutil.wait_procs(alive, timeout=15)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    shm.sweep(shm.server_prefix(server.process.pid))


# Profiles: one server per profile, shared by the session.


def _named(item: pytest.Item) -> tuple[str, ...]:
    """The profiles a test names: its closest `profile` mark's, else `default`."""
    mark = item.get_closest_marker("profile")
    names: tuple[str, ...] = tuple(mark.args) if mark is not None and mark.args else (DEFAULT,)
    check_names(names, item.nodeid)
    return names


def _takes_profile_server(module: object, fixtures: list[str]) -> bool:
    """Whether `server` is a profile's: not where a file defines a `server` of its own (a
    `fresh_server` its tests exhaust)."""
    return "server" in fixtures and "server" not in vars(module)


def _used(item: pytest.Item) -> tuple[str, ...]:
    """The profiles whose servers a test takes: the first it names with `server`, every one it
    names with `profile_server`."""
    fixtures = getattr(item, "fixturenames", [])
    if "profile_server" in fixtures:
        return _named(item)
    module = getattr(item, "module", None)
    return _named(item)[:1] if _takes_profile_server(module, fixtures) else ()


class ProfileServers:
    """The session's profile servers: each started when a test first asks for it, stopped once
    every test that names it has run (whatever their order: pytest's, or xdist's on a worker).
    Profiles with the same launch share one server."""

    def __init__(self) -> None:
        self._running: dict[tuple[object, ...], Server] = {}
        self._started: set[tuple[object, ...]] = set()
        self._users: dict[tuple[object, ...], set[str]] = {}
        self._groups: dict[tuple[object, ...], str] = {}
        """Each started launch's xdist group (`profile_group`)."""

    def plan(self, items: list[pytest.Item]) -> None:
        """Note which tests use each launch."""
        for item in items:
            for name in _used(item):
                self._users.setdefault(PROFILES[name].launch_key(), set()).add(item.nodeid)

    def server(self, name: str, request: pytest.FixtureRequest) -> Server:
        """`name`'s server, started now if this is its first test (on an xdist worker, again
        where a test names it after the worker stopped it: `finished`)."""
        profile = PROFILES[name]
        key = profile.launch_key()
        if key in self._running:
            return self._running[key]
        if key in self._started and not XDIST_WORKER:  # stopped after its last test
            raise RuntimeError(f"profile {name!r} asked for again after its last test")
        self._started.add(key)
        self._groups[key] = profile_group(name)
        server = self._start(name, profile, request)
        self._running[key] = server
        return server

    def _start(self, name: str, profile: Profile, request: pytest.FixtureRequest) -> Server:
        folder = request.getfixturevalue("tmp_path_factory").mktemp(f"profile-{name}")
        values = {"{dir}": str(folder)}
        if "{store}" in profile.config + "".join(profile.env.values()):
            values["{store}"] = request.getfixturevalue("postgres").database()

        def fill(text: str) -> str:
            for placeholder, value in values.items():
                text = text.replace(placeholder, value)
            return text

        config = fill(profile.config)
        env = {k: fill(v) for k, v in profile.env.items()}
        for file_name, text in profile.files.items():
            (folder / file_name).write_text(text)
        if profile.image:
            srv = start_image(folder, config, env)
        else:
            srv = start_server(
                folder, config, backend=profile.backend, env=env, launch=profile.launch
            )
        try:
            srv.readiness = wait_ready(srv)
        except BaseException:
            stop_server(srv)
            raise
        return srv

    def finished(self, nodeid: str, nextitem: pytest.Item | None) -> None:
        """Stop the servers whose tests have all run now. An xdist worker runs only some of
        the tests `plan` saw, a group at a time (`xdist_group`): it stops those the next test
        does not take."""
        for key, users in self._users.items():
            users.discard(nodeid)
            if not users and key in self._running:
                stop_server(self._running.pop(key))
        if XDIST_WORKER:
            used = _used(nextitem) if nextitem else ()
            wanted = {PROFILES[name].launch_key() for name in used}
            # The rest of the server's group comes next (xdist hands a worker a whole group):
            # a test in it that takes no server (the Ray file's last two, in `default`'s group)
            # must not stop it, to be started again for the group's next test.
            group = _xdist_group(nextitem) if nextitem else None
            wanted |= {key for key in self._running if self._groups[key] == group}
            for key in [key for key in self._running if key not in wanted]:
                stop_server(self._running.pop(key))

    def close(self) -> None:
        while self._running:
            stop_server(self._running.popitem()[1])


_SERVERS = pytest.StashKey[ProfileServers]()


def _xdist_group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0]) if mark is not None and mark.args else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`server` is parametrized by the test's profile, session-scoped, so pytest runs the tests
    of one profile together (its ids end with `[profile]`)."""
    if _takes_profile_server(metafunc.module, metafunc.fixturenames):
        (name, *_) = _named(metafunc.definition)
        metafunc.parametrize("server", [name], indirect=True, scope="session", ids=[name])


def profile_group(name: str) -> str:
    """The `xdist_group` of the tests of profile `name`'s server: the launch of its server
    (profiles with the same launch share one). A file whose other tests must run on the same
    worker (they share a module fixture with one that takes the server) names it."""
    key = PROFILES[name].launch_key()
    return "profile-" + min(other for other, p in PROFILES.items() if p.launch_key() == key)


def _profile_group(item: pytest.Item) -> str | None:
    """The `xdist_group` of a test that takes a profile's server."""
    used = _used(item)
    return profile_group(used[0]) if used else None


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py's, which names every test's group
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """For `pytest -n N --dist loadgroup` (make test): the tests of one server's launch go to
    one worker and run there one after another (the server starts once, and pytest's
    session-scoped `server` never outlives it)."""
    for item in items:
        group = _profile_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session: pytest.Session) -> None:
    servers = ProfileServers()
    servers.plan(session.items)  # in the order they run: pytest grouped them by profile
    session.stash[_SERVERS] = servers


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        return (yield)
    finally:
        if _SERVERS in item.session.stash:
            item.session.stash[_SERVERS].finished(item.nodeid, nextitem)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _SERVERS in session.stash:
        session.stash[_SERVERS].close()


@pytest.fixture(scope="session")
def server(request: pytest.FixtureRequest) -> Server:
    """The server of the profile the test names (`@pytest.mark.profile`), else `default`'s."""
    name: str = getattr(request, "param", DEFAULT)
    return request.session.stash[_SERVERS].server(name, request)


@pytest.fixture
def profile_server(request: pytest.FixtureRequest) -> Callable[[str], Server]:
    """`profile_server(name)`: the server of a profile the test names beside its first (e.g.
    `@pytest.mark.profile("default", "keys")`)."""
    names = _named(request.node)

    def get(name: str) -> Server:
        if name not in names:
            raise pytest.UsageError(
                f"{request.node.nodeid} asks for profile {name!r}: name it in its "
                f"@pytest.mark.profile(...) (it names {list(names)})"
            )
        return request.session.stash[_SERVERS].server(name, request)

    return get
