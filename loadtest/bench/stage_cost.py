"""Where a page's CPU time goes in our server, stage by stage, beside RapidOCR's API on the same
models (issue 46, items 4 and 5).

Starts every server under test at once: ours, once per `--ours LABEL=CONFIG` (each its own
`ocr-serve`, from this checkout or, with `LABEL=CONFIG@CHECKOUT`, from another one's `.venv`, so
a "before" commit runs beside the "after"), and with `--rapidocr-venv` RapidOCR's API server
(`rapidocr_api` under Uvicorn, 2 workers x 1 thread on OpenVINO at its own precision, the first
`--ours` config's detector and recogniser, our detection and recognition settings:
`loadtest.servers.rapidocr_params`). Each gets the fixed page set once to warm up (its caches
then hold the pages' shapes, as a benchmark that repeats pages lets them), then the servers take
turns, `--rounds` times: a pass of every page at concurrency `--concurrency` on one, then on the
next. Interleaving and counting CPU time rather than wall time keep a shared machine's noise out
of the comparison as far as they can.

For each pass: pages/s (wall clock), the CPU time (user + system) of every process of the
server's tree (psutil) a page, and, for ours, the split `/metrics` gives it:
`ocr_device_cpu_seconds` by stage (the device workers, each batch from its arrival to its
answer; "between": outside batches) and `ocr_process_cpu_seconds` by process group (main, CPU
workers, device workers). Texts are checked against the first server's answers and the pages'
text layers (CER, merged words).

    ocr-bench stage-cost --pages-dir var/perf/pages24 \
        --ours v6=var/perf/v6.toml --rapidocr-venv .venv-rapidocr --concurrency 4 --rounds 2

The page set (`write_page_set`, 24 pages, made when `--pages-dir` is empty): 15 pages of the
bench's real PDFs (`engine_limit.real_page_set`), every third of them degraded as a poor scan
(`ocrmypdf_compare.degrade`, then JPEG at quality 55), and 3 pages each of Debian's maint-guide in
French, German and Spanish (`languages.LANGUAGE_PDFS`), at 150 dpi, each beside its text layer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from loadtest.accuracy import merged_words, pages_cer
from loadtest.bench.common import degrade
from loadtest.bench.results import Results
from loadtest.bench.scenario import Scenario, register
from loadtest.client import Api, PreparedRequest, prepare_request, send
from loadtest.documents import load_documents
from loadtest.onnx_export import OnnxModels, write_keys
from loadtest.servers import ServerProcess, free_port, rapidocr_params, start, start_rapidocr
from models.bundle import load_bundle
from serving.config import load_config
from serving.convert import pdf_pages
from serving.request_options import ocr_options

DEVICE_CPU = "ocr_device_cpu_seconds_total"
PROCESS_CPU = "ocr_process_cpu_seconds"
ALONE_BATCHES = "ocr_alone_batches_total"


def write_page_set(out_dir: Path, dpi: float = 150.0) -> list[Path]:
    """The 24 pages (module doc) as PNG, each with its text layer beside it (`.txt`)."""
    from loadtest.bench.common import LANGUAGE_PDFS
    from loadtest.engine_limit import real_page_set

    out_dir.mkdir(parents=True, exist_ok=True)
    pages = []
    for index, (label, image, truth) in enumerate(real_page_set(15, dpi)):
        if index % 3 == 2:
            ok, jpeg = cv2.imencode(
                ".jpg", degrade(image, seed=index), [cv2.IMWRITE_JPEG_QUALITY, 55]
            )
            if not ok:
                raise RuntimeError(f"cannot encode {label}")
            image, label = cv2.imdecode(jpeg, cv2.IMREAD_COLOR), f"{label}-degraded"
        pages.append((label, image, truth))
    for lang in ("fr", "de", "es"):
        pdf = LANGUAGE_PDFS[lang]
        pages.extend((p.label, p.image, p.text) for p in pdf_pages.text_pages(pdf, 3, dpi=dpi))
    paths = []
    for label, image, truth in pages:
        path = out_dir / f"{label}.png"
        cv2.imwrite(str(path), image)
        path.with_suffix(".txt").write_text(truth, encoding="utf-8")
        paths.append(path)
    return paths


def _tree_cpu_s(pids: Sequence[int]) -> dict[int, float]:
    """CPU seconds (user + system) of each live process of these processes' trees, by pid."""
    seconds = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            seconds[proc.pid] = times.user + times.system
    return seconds


@dataclass
class Target:
    """What a pass reads the pages with, and what its passes measured."""

    label: str
    passes: list[dict[str, Any]] = field(default_factory=list)
    texts: dict[str, list[str]] = field(default_factory=dict)
    """Its answers in the warm-up pass (one page at a time): what later passes are held to."""

    def tree_cpu_s(self) -> dict[int, float]:
        """CPU seconds of each of its processes, by pid."""
        raise NotImplementedError

    def metrics(self) -> dict[tuple[str, str], float]:
        """(family, stage or process) -> value of the CPU-time series it reports; {} if none."""
        return {}

    def read(self, pages: Sequence[Path], concurrency: int) -> tuple[float, dict[str, list[str]]]:
        """Read every page once, `concurrency` at a time: (wall seconds, texts by page name;
        a page that failed has none)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop its processes."""
        raise NotImplementedError


@dataclass
class Server(Target):
    """A server under test, read over HTTP."""

    api: Api = "v1"
    process: ServerProcess | None = None
    requests: dict[str, PreparedRequest] = field(default_factory=dict)

    def tree_cpu_s(self) -> dict[int, float]:
        """CPU seconds of every process of the server's tree, by pid."""
        return _tree_cpu_s([self.server.process.pid])

    @property
    def server(self) -> ServerProcess:
        """The running server."""
        if self.process is None:
            raise RuntimeError(f"{self.label} is not started")
        return self.process

    def read(self, pages: Sequence[Path], concurrency: int) -> tuple[float, dict[str, list[str]]]:
        """The pages as requests to the server, `concurrency` at a time."""
        for page in pages:
            if page.name not in self.requests:
                document = load_documents([page])[0]
                self.requests[page.name] = prepare_request(self.api, document)
        named = [(page.name, self.requests[page.name]) for page in pages]
        return asyncio.run(_closed_loop(self, named, concurrency))

    def stop(self) -> None:
        """SIGTERM, then SIGKILL."""
        if self.process is not None:
            self.process.stop()

    def metrics(self) -> dict[tuple[str, str], float]:
        """Ours: (family, stage or process) -> value, of the CPU-time series in `/metrics`."""
        if self.api != "v1":
            return {}
        text = httpx.get(f"{self.server.url}/metrics", timeout=30).text
        found: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in (DEVICE_CPU, ALONE_BATCHES):
                    key = (sample.name, sample.labels["stage"])
                elif sample.name == PROCESS_CPU:
                    key = (PROCESS_CPU, sample.labels["process"])
                else:
                    continue
                found[key] = found.get(key, 0.0) + sample.value
        return found


async def _closed_loop(
    server: Server, requests: Sequence[tuple[str, PreparedRequest]], concurrency: int
) -> tuple[float, dict[str, list[str]]]:
    """Send every request once, `concurrency` at a time; (wall seconds, texts of the answered)."""
    queue = list(requests)
    texts: dict[str, list[str]] = {}

    async def worker(client: httpx.AsyncClient) -> None:
        while queue:
            name, request = queue.pop(0)
            outcome = await send(client, server.api, request, timeout_s=900)
            if outcome.ok and outcome.texts is not None:
                texts[name] = list(outcome.texts)

    started = time.monotonic()
    async with httpx.AsyncClient(base_url=server.server.url, timeout=900) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return time.monotonic() - started, texts


@dataclass
class Engine(Target):
    """Our engine in process (`serving.engine.local.LocalEngine`, one math thread), in as many
    processes as the server has device workers, each page to whichever is free: what the
    machine does with nothing between pages but the pipeline (docs/performance.md, the server at
    the machine's limit)."""

    workers: list[subprocess.Popen[str]] = field(default_factory=list)

    def tree_cpu_s(self) -> dict[int, float]:
        """CPU seconds of the engine processes, by pid."""
        return _tree_cpu_s([worker.pid for worker in self.workers])

    def read(self, pages: Sequence[Path], concurrency: int) -> tuple[float, dict[str, list[str]]]:
        """The pages over the engine processes (`concurrency` does not apply: one page each)."""
        queue = list(pages)
        texts: dict[str, list[str]] = {}
        lock = threading.Lock()

        def serve(worker: subprocess.Popen[str]) -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    page = queue.pop(0)
                if worker.stdin is None or worker.stdout is None:
                    raise RuntimeError("engine worker without pipes")
                worker.stdin.write(f"{page.resolve()}\n")
                worker.stdin.flush()
                texts[page.name] = json.loads(worker.stdout.readline())

        started = time.monotonic()
        threads = [threading.Thread(target=serve, args=(w,)) for w in self.workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.monotonic() - started, texts

    def stop(self) -> None:
        """Close their input: they exit."""
        for worker in self.workers:
            if worker.stdin is not None:
                worker.stdin.close()
        for worker in self.workers:
            worker.wait(timeout=60)


def start_engine(label: str, spec: str, processes: int) -> Engine:
    """`processes` in-process engines for `--engine LABEL=CONFIG[@CHECKOUT]`, each of one math
    thread (`python -m loadtest.bench.stage_cost CONFIG`), loaded."""
    config, _, checkout = spec.partition("@")
    root = Path(checkout or ".").resolve()
    python = root / ".venv" / "bin" / "python" if checkout else Path(sys.executable)
    argv = [str(python), "-m", "loadtest.bench.stage_cost"]
    argv += [str(Path(config).resolve())]
    env = {**os.environ, "OCR_ENGINE__CPU_THREADS": "1", "OCR_ENGINE__CPU_LONE_THREADS": "1"}
    workers = [
        subprocess.Popen(
            argv, cwd=root, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        for _ in range(processes)
    ]
    for worker in workers:
        if worker.stdout is None or json.loads(worker.stdout.readline()) != "ready":
            raise RuntimeError(f"engine {label} did not start")
    return Engine(label, workers=workers)


def engine_worker(config: Path) -> int:
    """`python -m loadtest.bench.stage_cost CONFIG` (what `start_engine` runs): load the engine,
    then read each page path from stdin, answering its lines' texts as one JSON line."""
    from serving.engine.local import LocalEngine

    engine = LocalEngine(load_config(config, os.environ))
    engine.load()
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        image = cv2.imread(line.strip(), cv2.IMREAD_COLOR)
        print(json.dumps([text_line.text for text_line in engine.ocr(image).lines]), flush=True)
    return 0


def run_pass(server: Target, page_files: Sequence[Path], concurrency: int) -> dict[str, Any]:
    """One timed pass over the pages: pages/s, core-seconds a page, in all and by part."""
    cpu_before, metrics_before = server.tree_cpu_s(), server.metrics()
    wall_s, texts = server.read(page_files, concurrency)
    cpu_after, metrics_after = server.tree_cpu_s(), server.metrics()
    pages = len(page_files)
    # A process that started during the pass (a restarted worker) counts from 0.
    tree_s = sum(cpu_after[pid] - cpu_before.get(pid, 0.0) for pid in cpu_after)
    parts = {
        f"{family.removeprefix('ocr_').removesuffix('_total')}:{name}": (
            value - metrics_before.get((family, name), 0.0)
        )
        / pages
        for (family, name), value in metrics_after.items()
    }
    if not server.texts:
        server.texts = texts
    correct = sum(texts.get(n) == t for n, t in server.texts.items())
    return {
        "pages": pages,
        "failures": pages - len(texts),
        "wall_s": round(wall_s, 2),
        "pages_per_s": round(pages / wall_s, 4),
        "correct_pages_per_s": round(correct / wall_s, 4),
        "tree_core_s_per_page": round(tree_s / pages, 4),
        "parts_core_s_per_page": {k: round(v, 4) for k, v in sorted(parts.items())},
        "changed_pages": sum(n in texts and texts[n] != t for n, t in server.texts.items()),
    }


def start_ours(label: str, spec: str, out: Path) -> Server:
    """`ocr-serve` for `--ours LABEL=CONFIG[@CHECKOUT]`, on a free port."""
    config, _, checkout = spec.partition("@")
    root = Path(checkout or ".").resolve()
    python = root / ".venv" / "bin" / "python" if checkout else Path(sys.executable)
    port = free_port()
    argv = [str(python), "-m", "serving", "--config", str(Path(config).resolve())]
    argv += ["--port", str(port)]
    env = {"OCR_SERVER__LOG_LEVEL": "warning", "OCR_PADDLEX__VISUALIZE": "false"}
    cwd = os.getcwd()
    os.chdir(root)  # the checkout's packages first on sys.path, as its e2e servers run
    try:
        process = start(f"ours-{label}", argv, port, out / f"ours-{label}.log", env)
    finally:
        os.chdir(cwd)
    return Server(label, api="v1", process=process)


def start_rapidocr_api(config: str, venv: Path, out: Path) -> Server:
    """RapidOCR's API on `config`'s default det and rec models, 2 workers x 1 thread."""
    app = load_config(Path(config), {})
    bundle = load_bundle(app.models.det, app.models.rec, app.models.cls)
    if bundle.det.onnx_file is None or bundle.rec.onnx_file is None:
        raise SystemExit("RapidOCR needs ONNX models: the config's det and rec must be ONNX")
    keys = write_keys(bundle.rec, out / "rec_keys.txt")
    models = OnnxModels(bundle.det.onnx_file, bundle.rec.onnx_file, keys)
    params = rapidocr_params(ocr_options(bundle, app.pipeline), models, 1, "openvino")
    process = start_rapidocr(out, venv, params, workers=2)
    return Server("rapidocr", api="rapidocr", process=process)


def page_group(name: str) -> str:
    """A page's group for CER: "degraded" for the poor scans, else its PDF's language."""
    if "-degraded" in name:
        return "degraded"
    for lang in ("zh-cn", "fr", "de", "es"):
        if f"maint-guide.{lang}-" in name:
            return lang.removesuffix("-cn")
    return "en"


def accuracy(server: Target, truths: dict[str, str]) -> dict[str, Any]:
    """CER and merged words of the server's warm-up answers against the text layers, in all
    and per group (`page_group`)."""
    read = {name: server.texts.get(name, []) for name in truths}
    groups: dict[str, Any] = {}
    for group in sorted({page_group(n) for n in truths}):
        names = [n for n in truths if page_group(n) == group]
        groups[group] = {
            "cer": round(pages_cer({n: truths[n] for n in names}, read), 5),
            "merged_words": sum(merged_words(truths[n], "\n".join(read[n])) for n in names),
        }
    merged = sum(g["merged_words"] for g in groups.values())
    return {"cer": round(pages_cer(truths, read), 5), "merged_words": merged, "groups": groups}


def markdown(servers: Sequence[Target], concurrency: int) -> list[str]:
    """The report: one row per server, medians over its passes."""
    parts = sorted({p for s in servers for run in s.passes for p in run["parts_core_s_per_page"]})
    head = ["server", f"pages/s c={concurrency}", "correct pages/s", "core-s a page (tree)"]
    head += [*parts, "failed", "changed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for server in servers:

        def median(key: str, runs: list[dict[str, Any]] = server.passes) -> float:
            return float(statistics.median(run[key] for run in runs))

        cells = [
            server.label,
            f"{median('pages_per_s'):.3f}",
            f"{median('correct_pages_per_s'):.3f}",
            f"{median('tree_core_s_per_page'):.3f}",
        ]
        for part in parts:
            values = [r["parts_core_s_per_page"].get(part) for r in server.passes]
            known = [v for v in values if v is not None]
            cells.append(f"{statistics.median(known):.3f}" if known else "")
        cells.append(str(sum(r["failures"] for r in server.passes)))
        cells.append(str(sum(r["changed_pages"] for r in server.passes)))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


@register
class StageCost(Scenario):
    """Our servers' core-seconds a page by stage, beside RapidOCR's API and our engine."""

    name = "stage-cost"
    help = "core-seconds a page by stage: our servers, RapidOCR's API, our engine, interleaved"
    shared = ("out",)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The servers and engines to run, the page set, the passes."""
        parser.add_argument("--pages-dir", type=Path, default=Path("var/perf/pages24"))
        parser.add_argument("--ours", action="append", default=[], help="LABEL=CONFIG[@CHECKOUT]")
        parser.add_argument(
            "--engine",
            action="append",
            default=[],
            help="LABEL=CONFIG[@CHECKOUT]: our engine in process, one thread, beside the servers",
        )
        parser.add_argument("--engine-processes", type=int, default=2)
        parser.add_argument("--rapidocr-venv", type=Path, help="RapidOCR's API beside ours")
        parser.add_argument("--rapidocr-concurrency", type=int, help="default: --concurrency")
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument("--rounds", type=int, default=2)

    def run(self, args: argparse.Namespace) -> Results:
        """The servers side by side, interleaved passes (module doc)."""
        if not args.ours and not args.engine:
            raise SystemExit("ocr-bench stage-cost: name at least one --ours or --engine")
        if not sorted(args.pages_dir.glob("*.png")):
            write_page_set(args.pages_dir)
        page_files = sorted(args.pages_dir.glob("*.png"))
        truths = {p.name: p.with_suffix(".txt").read_text(encoding="utf-8") for p in page_files}
        args.out = args.out.resolve()
        args.out.mkdir(parents=True, exist_ok=True)
        targets: list[Target] = []
        concurrency: dict[str, int] = {}
        try:
            for spec in args.ours:
                label, _, config = spec.partition("=")
                targets.append(start_ours(label, config, args.out))
            if args.rapidocr_venv is not None:
                config = (args.ours or args.engine)[0].split("=", 1)[1].partition("@")[0]
                targets.append(start_rapidocr_api(config, args.rapidocr_venv, args.out))
                concurrency["rapidocr"] = args.rapidocr_concurrency or args.concurrency
            for target in targets:
                if isinstance(target, Server):
                    target.server.wait_ready("/readyz" if target.api == "v1" else "/")
            for spec in args.engine:
                label, _, config = spec.partition("=")
                targets.append(start_engine(label, config, args.engine_processes))
            for target in targets:  # warm-up: every page once, alone (its answers: the reference)
                first = run_pass(target, page_files, 1)
                print(f"{target.label} warm-up: {json.dumps(first)}", file=sys.stderr)
            for round_ in range(args.rounds):
                for target in targets:
                    level = concurrency.get(target.label, args.concurrency)
                    result = run_pass(target, page_files, level)
                    target.passes.append(result)
                    line = f"{target.label} round {round_ + 1}: {json.dumps(result)}"
                    print(line, file=sys.stderr)
        finally:
            for target in targets:
                target.stop()
        report = {t.label: {"passes": t.passes, **accuracy(t, truths)} for t in targets}
        lines = markdown(targets, args.concurrency)
        groups = sorted({g for t in targets for g in report[t.label]["groups"]})
        lines += ["", "| read by | CER | merged | " + " | ".join(groups) + " |"]
        lines.append("|" + "---|" * (3 + len(groups)))
        for t in targets:
            found = report[t.label]
            cells = [
                f"{found['groups'][g]['cer']:.2%} m{found['groups'][g]['merged_words']}"
                for g in groups
            ]
            lines.append(
                f"| {t.label} | {found['cer']:.2%} | {found['merged_words']} | "
                + " | ".join(cells)
                + " |"
            )
        return Results(data=report, markdown="\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(engine_worker(Path(sys.argv[1])))
