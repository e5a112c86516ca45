"""The packages' import arrows, read from the source with `ast` (nothing is imported).

Every package of the product (serving, pipelines, models, loadtest) sits in a layer (`LAYERS`,
also in docs/architecture.md), and an import, wherever it is (at module level, inside a function,
under `if TYPE_CHECKING:`), never goes to a higher layer. No module imports, in any of these ways,
a module that leads back to it: a circle at module level works or fails depending on which side
is imported first, and one hidden in a function or a type hint still ties two modules into one.
And no two parts (a sub-package, or a module at the top of serving/) import each other both ways.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("serving", "models", "pipelines", "loadtest")


def _modules() -> dict[str, Path]:
    """Every module of `PACKAGES`, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run on import: the body with its blocks (`if`, `try`, `with`, a class's),
    but not functions or `if TYPE_CHECKING:` blocks."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or _is_type_checking(node):
            continue
        yield node
        for block in ("body", "orelse", "finalbody"):
            yield from _module_level(getattr(node, block, []))
        for handler in getattr(node, "handlers", []):
            yield from _module_level(handler.body)


def _imported(name: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The dotted names `node`, in module `name`, imports: `from a import b` is module `a.b`
    where that is one of ours, else (a name `a` defines) `a`."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    base = node.module or ""
    if node.level:
        package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}".rstrip(".") if base else package
    modules = {f"{base}.{alias.name}" for alias in node.names} & MODULES.keys()
    return modules if len(modules) == len(node.names) else modules | {base}


def _run_time(node: ast.AST) -> Iterator[ast.AST]:
    """`node` and everything under it but `if TYPE_CHECKING:` blocks (never run)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not (isinstance(child, ast.stmt) and _is_type_checking(child)):
            yield from _run_time(child)


def _imports(name: str, *, module_level: bool, typing: bool = True) -> set[str]:
    """Our modules that module `name` imports (at module level, or anywhere in it; with
    `typing=False`, not counting `if TYPE_CHECKING:` blocks)."""
    tree = ast.parse(MODULES[name].read_text("utf-8"), str(MODULES[name]))
    if module_level:
        nodes: Iterable[ast.AST] = _module_level(tree.body)
    else:
        nodes = ast.walk(tree) if typing else _run_time(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found |= _imported(name, node)
    return found


def _ours(names: set[str]) -> set[str]:
    """`names` that are our modules, a dotted name that is not one taken as its package."""
    ours = set()
    for full in names:
        while full and full not in MODULES:
            full = full.rpartition(".")[0]
        if full:
            ours.add(full)
    return ours


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _mutual(uses: dict[str, set[str]]) -> list[str]:
    """The pairs of modules that import each other (a package and its own modules aside)."""
    return sorted(
        f"{name} <-> {other}"
        for name, targets in uses.items()
        for other in targets
        if name < other
        and name in uses.get(other, ())
        and not other.startswith(f"{name}.")
        and not name.startswith(f"{other}.")
    )


def _graph() -> dict[str, set[str]]:
    """Module-level imports between our modules, without the arrow from a module to the
    packages above it (importing `a.b.c` runs `a/__init__.py` first: that is no circle)."""
    graph = {}
    for name in MODULES:
        targets = _ours(_imports(name, module_level=True)) - {name}
        graph[name] = {t for t in targets if not name.startswith(f"{t}.")}
    return graph


@pytest.mark.parametrize("package", ["models", "pipelines"])
def test_the_lower_packages_import_nothing_from_serving(package: str) -> None:
    arrows = sorted(
        f"{name} -> {target}"
        for name in MODULES
        if name == package or name.startswith(f"{package}.")
        for target in _imports(name, module_level=False)
        if target == "serving" or target.startswith("serving.")
    )
    assert arrows == []


def test_pipelines_import_no_model_code() -> None:
    arrows = sorted(
        f"{name} -> {target}"
        for name in MODULES
        if name.startswith("pipelines")
        for target in _imports(name, module_level=False)
        if target.split(".")[0] in ("models", "loadtest")
    )
    assert arrows == []


def _loadtest_tool(name: str) -> str | None:
    """The tool of `loadtest` a module belongs to (`sim`, `soak`, `bench`, `gpu`), None for the
    load-test client, reports and shared pieces at the top (and for modules outside loadtest)."""
    parts = name.split(".")
    tools = ("sim", "soak", "bench", "gpu")
    return parts[1] if parts[0] == "loadtest" and len(parts) > 1 and parts[1] in tools else None


def test_the_loadtest_tools_share_only_the_top_of_loadtest() -> None:
    """`loadtest.sim`, `.soak`, `.bench` and `.gpu` import nothing from one another, and the
    top of `loadtest` imports none of them: each tool can be read, and moved, on its own."""
    arrows = sorted(
        f"{name} -> {target}"
        for name in MODULES
        if name.startswith("loadtest")
        for target in _ours(_imports(name, module_level=False))
        if _loadtest_tool(target) not in (None, _loadtest_tool(name))
    )
    assert arrows == []
    assert _loadtest_tool("loadtest.sim.run") == "sim"
    assert _loadtest_tool("loadtest.run") is None


SERVING_ALLOWED: dict[str, tuple[str, ...]] = {
    "serving.decode": ("serving.errors", "serving.config"),
    "serving.engine": (
        "serving.config",
        "serving.errors",
        "serving.model_sets",
        "serving.request_options",
        "serving.proc",
    ),
    "serving.convert": ("serving.config", "serving.errors", "serving.engine"),
    "serving.scheduling": ("serving.config", "serving.errors", "serving.decode"),
}
"""What each lower package of serving/ may import of serving/ (itself aside): decoding needs only
the config and errors; the engine in one process no HTTP, queues, service or jobs; the model
conversion the engine; the scheduling's policy a page's sizes."""

SERVICE_USERS = (
    "serving.service",
    "serving.http",
    "serving.batch",
    "serving.ocrmypdf_plugin",  # its local mode runs the runtime, as `ocr-batch` does
)
"""The packages that may import `serving.service` (besides the frame: app, cli)."""

FRAME_ENTRIES = ("serving.app", "serving.cli", "serving.server", "serving.__main__")
"""The program's frame that starts the server: no package below imports it."""


def _within(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in prefixes)


@pytest.mark.parametrize("package", sorted(SERVING_ALLOWED))
def test_the_lower_serving_packages_import_only_what_is_below_them(package: str) -> None:
    allowed = (package, *SERVING_ALLOWED[package])
    arrows = sorted(
        f"{name} -> {target}"
        for name in MODULES
        if _within(name, [package])
        for target in _ours(_imports(name, module_level=False))
        if target.startswith("serving") and target != "serving" and not _within(target, allowed)
    )
    assert arrows == []


def test_only_the_layers_above_the_service_use_it() -> None:
    """Decoding, the engine, the workers, the queues and the outputs run the service's parts;
    they never reach up into `serving.service`, nor into the frame that starts the server."""
    arrows = sorted(
        f"{name} -> {target}"
        for name in MODULES
        if name.startswith("serving.") and not _within(name, FRAME_ENTRIES)
        for target in _ours(_imports(name, module_level=False))
        if (_within(target, ["serving.service"]) and not _within(name, SERVICE_USERS))
        or _within(target, FRAME_ENTRIES)
    )
    assert arrows == []
    assert _within("serving.service.ocr", SERVICE_USERS)
    assert not _within("serving.services", ["serving.service"])


LAYERS: tuple[tuple[str, ...], ...] = (
    ("pipelines",),
    ("models",),
    (
        "serving",
        "serving.errors",
        "serving.cpus",
        "serving.proc",
        "serving.request_context",
        "serving.config_paths",
        "serving.options",
        "serving.addresses",
        "serving.tracing",
    ),
    ("serving.config",),
    (
        "serving.decode",
        "serving.model_sets",
        "serving.log_config",
        "serving.telemetry",
        "serving.secret_env",
    ),
    ("serving.scheduling",),
    ("serving.metrics", "serving.request_options"),
    ("serving.engine",),
    ("serving.workers", "serving.convert"),
    ("serving.outputs",),
    ("serving.jobs",),
    ("serving.service",),
    ("serving.http", "serving.batch", "serving.ocrmypdf_plugin", "serving.mcp"),
    ("serving.app", "serving.server", "serving.healthcheck"),
    ("serving.cli", "serving.__main__"),
    ("loadtest",),
    ("loadtest.sim", "loadtest.soak", "loadtest.bench", "loadtest.gpu"),
)
"""The product's parts, lowest first: a module imports only from its own layer and those below
(docs/architecture.md, "Layers"). The pure page steps; the model adapters; serving's leaves (its
errors, the CPUs it may use, process helpers, the current request's id, config paths, the OCR
options and their ranges, the addresses it may connect to); the typed config; decoding, the model
sets, the logging setup; the scheduling policy; metrics and a request's options; the engine in one
process; the worker processes and the model conversion; the output formats; batch jobs; the OCR
service and the runtime that wires it all; the HTTP layer, `ocr-batch` and the OCRmyPDF plugin; the
app and the server; the command line. Then the load-test tooling: its shared top, then its tools. A
part is a sub-package or a module at the top of its package (`_part`); a new one must be placed
here."""


def _part(name: str) -> str | None:
    """The entry of `LAYERS` module `name` belongs to: the longest that is it or a package above
    it; None for a module no layer names."""
    parts = [p for layer in LAYERS for p in layer if name == p or name.startswith(f"{p}.")]
    return max(parts, key=len) if parts else None


LAYER_OF = {part: index for index, layer in enumerate(LAYERS) for part in layer}


def _all_imports() -> dict[str, set[str]]:
    """Every import between our modules, wherever it is (inside functions and `if
    TYPE_CHECKING:` blocks too), but from a module to the packages above it (importing `a.b.c`
    runs `a/__init__.py` first: no arrow back)."""
    return {
        name: {
            target
            for target in _ours(_imports(name, module_level=False)) - {name}
            if not name.startswith(f"{target}.")
        }
        for name in MODULES
    }


def test_every_module_has_a_layer() -> None:
    assert sorted(name for name in MODULES if _part(name) is None) == []


def test_no_import_goes_up_a_layer() -> None:
    """`serving/convert/calibration.py` read its pages from `loadtest.pages`, a package above
    the product; the engine reached into the workers for a process helper."""
    arrows = sorted(
        f"{name} -> {target}"
        for name, targets in _all_imports().items()
        for target in targets
        if LAYER_OF[_part(target) or ""] > LAYER_OF[_part(name) or ""]
    )
    assert arrows == []


def test_no_circle_of_imports() -> None:
    """Four modules went round (config -> scheduling.batch_shapes -> request_options (a type
    hint) -> model_sets -> config), and the device worker hid its import of the engine's
    warm-up, which imported the workers, in five functions. Two modules that need each other
    want a third that both use (as `serving.request_context` for logging and HTTP)."""
    assert _cycles(_all_imports()) == []


def test_no_two_parts_import_each_other() -> None:
    """Sub-packages (and the modules at the top of serving/) in one layer may use each other,
    one way: the jobs used the OCR service, which built the jobs' runner; logging read the
    request id from the HTTP layer, which runs on the workers, which set up logging."""
    uses: dict[str, set[str]] = {}
    for name, targets in _all_imports().items():
        for target in targets:
            mine, theirs = _part(name), _part(target)
            if mine is not None and theirs is not None and mine != theirs:
                uses.setdefault(mine, set()).add(theirs)
    assert _mutual(uses) == []


def test_the_jobs_server_imports_nothing_from_ocr_batch() -> None:
    """`ocr-batch` (serving/batch/) drives the server's parts; the server's jobs never need it."""
    arrows = sorted(
        f"{name} -> {target}"
        for name in MODULES
        if name.startswith("serving.") and not name.startswith("serving.batch")
        for target in _imports(name, module_level=False)
        if target.startswith("serving.batch")
    )
    assert arrows == []


def test_the_checks_see_deferred_imports_and_circles() -> None:
    """The readers above find what they look for: an import inside a function, and a circle."""
    tree = ast.parse("def f():\n    from serving.config import load_config\n")
    deferred = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert _imported("models.convert", deferred[0]) == {"serving.config"}
    assert list(_module_level(tree.body)) == []  # run on import: not the function
    hinted = ast.parse("if TYPE_CHECKING:\n    import a\ndef f():\n    import b\n")
    assert [n.names[0].name for n in _run_time(hinted) if isinstance(n, ast.Import)] == ["b"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _mutual({"a": {"b", "c"}, "b": {"a"}, "c": set(), "c.d": {"c"}}) == ["a <-> b"]
    assert "models.convert" in _graph()["models.onnx_predictor"]
    assert _part("serving.workers.device_worker") == "serving.workers"
    assert _part("serving.proc") == "serving.proc"
    assert _part("loadtest.bench.run") == "loadtest.bench"
    assert _part("loadtest.accuracy") == "loadtest"
    assert _part("elsewhere") is None
    assert LAYER_OF["pipelines"] < LAYER_OF["serving.config"] < LAYER_OF["loadtest"]


def test_a_server_starts_without_the_pdf_writers_libraries() -> None:
    """`serving.outputs.formats` imports the PDF renderer at the first PDF: fpdf, fontTools,
    HarfBuzz and pikepdf took 0.17 s of each server process's start (2026-12-07)."""
    import subprocess
    import sys

    probe = (
        "import sys, serving.cli; "
        "print(sorted({'fpdf', 'fontTools', 'uharfbuzz', 'pikepdf'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
