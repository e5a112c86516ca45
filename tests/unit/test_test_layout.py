"""The test tree itself: pytest imports test modules by their basename (no package `__init__`),
so two test files with one name in different folders stop the collection of the whole suite; e2e
files share their servers through named profiles (tests/e2e/profiles.py, docs/tests.md)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from serving.config import load_config
from tests.e2e.profiles import DEFAULT, PROFILES

TESTS = Path(__file__).resolve().parents[1]
E2E = TESTS / "e2e"

STARTERS = {"start_server", "serving", "start_image"}
"""tests/e2e/conftest.py's ways to start a server, for profiles; a test's own is `fresh_server`."""
SERVER_COMMANDS = ("ocr-serve", "serving.cli")
"""Strings in a subprocess call that start a server (and `"-m", "serving"`)."""
OWN_SERVERS = {
    "test_soak.py": "loadtest.soak starts, measures and stops the server it soaks",
    "test_gpu_check_dry_run.py": "scripts/gpu-check.sh starts its server as on a GPU machine",
    "test_safe_defaults.py": "its keyed server runs as the image's uid (10001) when the suite "
    "runs as root, so that a process of that uid can be tried against it (issue 49)",
}
"""Files whose tool under test starts its own server, and why."""
TOOLS_THAT_SERVE = ("loadtest.soak", "gpu-check.sh")
LAUNCHER = "from serving.cli import"
"""A `python -c` launcher of `ocr-serve` (`Profile.launch` is the way to hook one)."""


def test_no_two_test_modules_share_a_basename() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []


def _strings(node: ast.AST) -> list[str]:
    return [
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def server_starts(source: str) -> list[str]:
    """What in an e2e test file starts a server other than through a profile or `fresh_server`:
    one line each."""
    tree = ast.parse(source)
    docstrings = {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
    }  # and other bare strings: not code
    code_strings = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]
    found = [
        f"runs {tool}"
        for tool in (*TOOLS_THAT_SERVE, LAUNCHER)
        if any(tool in s for s in code_strings)
    ]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "tests.e2e.conftest":
            found += [f"imports {a.name}" for a in node.names if a.name in STARTERS]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(TOOLS_THAT_SERVE):
            found.append(f"imports {node.module}")
        elif isinstance(node, ast.Call) and _called(node) in STARTERS:
            found.append(f"line {node.lineno}: {_called(node)}(...)")
        elif isinstance(node, ast.Call) and _called(node) in {"Popen", "run", "call", "check_call"}:
            strings = _strings(node)
            if any(c in s for s in strings for c in SERVER_COMMANDS) or (
                "-m" in strings and "serving" in strings
            ):
                found.append(f"line {node.lineno}: {_called(node)}(...) of a server")
    return found


def test_e2e_files_start_servers_only_through_profiles_or_fresh_server() -> None:
    """A server outside a profile is one more start for the whole suite: a test names a profile
    (`@pytest.mark.profile`, `server`), or, where it kills, freezes or exhausts its server,
    starts its own with `fresh_server` (docs/tests.md: Profiles)."""
    offences = {}
    for path in sorted(E2E.glob("test_*.py")):
        found = server_starts(path.read_text())
        if path.name in OWN_SERVERS:
            assert found, f"{path.name} no longer starts its own server: drop it from OWN_SERVERS"
            continue
        if found:
            offences[path.name] = found
    assert offences == {}


@pytest.mark.parametrize(
    "source",
    [
        "from tests.e2e.conftest import start_server\n",
        "from tests.e2e.conftest import serving\nwith serving(tmp) as s: pass\n",
        "subprocess.Popen([sys.executable, '-m', 'serving', '--port', '1'])\n",
        "subprocess.Popen([str(BIN / 'ocr-serve')])\n",
        "subprocess.run(['bash', 'scripts/gpu-check.sh'])\n",
        "from loadtest.soak.run import main\n",
        "code = 'import sys; from serving.cli import main; main()'\n",
    ],
)
def test_the_layout_rule_sees_each_way_to_start_a_server(source: str) -> None:
    assert server_starts(source)


def test_the_layout_rule_lets_profiles_fresh_servers_and_other_processes_be() -> None:
    source = (
        "from tests.e2e.conftest import Server, fresh_server, stop_server\n"
        "srv = fresh_server(tmp_path, CONFIG)\n"
        "subprocess.run([sys.executable, '-m', 'serving.batch.cli', folder])\n"
        "subprocess.Popen([sys.executable, '-c', 'pass'])\n"
    )
    assert server_starts(source) == []


def _marked_profiles(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "profile"
            and "mark" in ast.unparse(node.func.value)
        ):
            names |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    return names


def test_every_profile_named_exists_and_every_profile_is_named() -> None:
    named = {DEFAULT}
    for path in sorted(E2E.glob("test_*.py")):
        marked = _marked_profiles(path.read_text())
        assert marked <= set(PROFILES), (path.name, sorted(marked - set(PROFILES)))
        named |= marked
    assert sorted(set(PROFILES) - named) == []


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_is_a_config_the_server_loads(name: str, tmp_path: Path) -> None:
    """Without starting it: a profile whose config the server would refuse fails here."""
    profile = PROFILES[name]

    def fill(text: str) -> str:
        store = "postgresql://u@127.0.0.1:5432/db?sslmode=disable"
        return text.replace("{dir}", str(tmp_path)).replace("{store}", store)

    path = tmp_path / "config.toml"
    path.write_text(fill(profile.config))
    environ = {k: fill(v) for k, v in profile.env.items() if k.startswith("OCR_")}
    environ.pop("OCR_API_KEYS", None)  # read by the server, not the config
    environ.pop("OCR_CONFIG", None)
    if profile.image:
        environ["OCR_SERVER__PORT"] = "8000"
    config = load_config(path, environ)
    assert config.server.host in ("127.0.0.1", "0.0.0.0")


def test_a_files_tests_run_on_one_xdist_worker() -> None:
    """`make test`'s `-n 2 --dist loadgroup` keeps each group (a file, a profile's server) on one
    worker. pytest 9 lost pytest-xdist 3.8's group suffix once, and every group's tests were
    spread over the workers, each loading the same servers and engines (tests/conftest.py)."""
    workers = ("-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/unit/test_config_paths.py", *workers],
        capture_output=True,
        text=True,
        cwd=TESTS.parent,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    ran = re.findall(r"^\[(gw\d)\] .*PASSED (\S+)", run.stdout, re.MULTILINE)
    assert len(ran) == 9, run.stdout
    assert len({worker for worker, _ in ran}) == 1, ran
    assert all(nodeid.endswith("@tests/unit/test_config_paths.py") for _, nodeid in ran), ran
