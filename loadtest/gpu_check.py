"""The GPU check's short benchmark (`scripts/gpu-check.sh` runs it on the GPU machine).

One run, side by side, on the bundle's pages (`make gpu-bundle`):

1. the engine limit: the whole pipeline in one process on `--device`, page after page, for at
   least `--min-seconds`;
2. the server on [device] at each `--concurrency`, and on [device, "cpu"] at the highest, each
   level about `--level-seconds` at the engine limit's pace (at least `--requests`): pages/s,
   latency, batch-size histograms per stage, peak GPU memory (nvidia-smi);
3. the CPU-side limit: the same server whose device answers instantly with recorded detection
   maps (`REPLAY`), so pages/s is what its CPU workers can prepare;
4. the ratio the issue asks for: server pages/s at the highest concurrency over
   min(engine limit, CPU-side limit).

Writes gpu-check.json and gpu-check.md to `--out`. On a machine without a GPU it runs the same
steps on `--device cpu` with tiny settings (a dry run of the script; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loadtest import servers
from loadtest.documents import load_documents
from loadtest.engine_limit import measure
from loadtest.run import run_level
from models.base import EngineBackend, Predictor
from models.engine_options import DEVICE_KINDS, EngineOptions
from models.fake_predictor import FakePredictor
from models.spec import MODEL_FORMATS, ModelSpec
from models.torch_options import TORCH_COMPILE_MODES, TORCH_SHAPES, TorchCompile, TorchOptions
from serving.config import AppConfig, EngineConfig, ModelsConfig, PaddlexConfig, WorkersConfig
from serving.local_engine import LocalEngine

READ_WITH_FILE = "read-with.json"
"""Beside the bundle's expected.json: the versions of Paddle, OpenCV and numpy that read it."""
REPLAY_ENV = "OCR_REPLAY_DET_MAPS"
"""The .npz of detection maps by input shape that `REPLAY` answers with."""


class ReplayDet:
    """Answers each det batch with a recorded real map for the same input shape (nearest shape
    otherwise), so the CPU stages see real boxes, at no device cost."""

    reads_text = False  # the warm-up page's text is not checked (`serving.warmup`)

    def __init__(self, maps: dict[tuple[int, int], np.ndarray]) -> None:
        self.maps = maps

    def load(self) -> None:
        return None

    def warmup(self) -> None:
        return None

    def close(self) -> None:
        return None

    def run(self, batch: np.ndarray) -> np.ndarray:
        n, _, height, width = batch.shape
        found = self.maps.get((height, width))
        if found is None:
            found = np.zeros((1, height, width), dtype=np.float32)
        return np.repeat(found[np.newaxis], n, axis=0)


def _replay(spec: ModelSpec, options: EngineOptions) -> Predictor:
    if spec.kind != "det":
        return FakePredictor(spec.kind, num_classes=len(spec.character_dict) + 2)
    with np.load(os.environ[REPLAY_ENV]) as data:
        maps = {tuple(int(d) for d in key.split("x")): data[key] for key in data.files}
    return ReplayDet(maps)  # type: ignore[arg-type]


REPLAY = EngineBackend(
    name="replay",
    devices=frozenset(DEVICE_KINDS),
    formats=frozenset(MODEL_FORMATS),
    create=_replay,
)
"""Instant device answers: recorded det maps, model-shaped rec output (CPU-side limit)."""


class Recorder:
    """Wraps a det predictor and keeps one output map per input shape."""

    def __init__(self, inner: Predictor) -> None:
        self.inner = inner
        self.maps: dict[str, np.ndarray] = {}

    def run(self, batch: np.ndarray) -> np.ndarray:
        out = self.inner.run(batch)
        self.maps.setdefault(f"{batch.shape[2]}x{batch.shape[3]}", out[0].copy())
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class GpuMemory:
    """Peak GPU memory used (MiB, all processes), sampled with nvidia-smi every 0.5 s."""

    def __init__(self) -> None:
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._smi = shutil.which("nvidia-smi")

    def __enter__(self) -> GpuMemory:
        if self._smi:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        argv = [str(self._smi), "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
        while not self._stop.wait(0.5):
            try:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
                used = sum(float(v) for v in out.split())
            except (OSError, subprocess.SubprocessError, ValueError):
                continue
            self.peak_mib = max(self.peak_mib or 0.0, used)


def config_toml(args: argparse.Namespace, devices: Sequence[str]) -> str:
    """The server's config for one run."""
    listed = ", ".join(f'"{d}"' for d in devices)
    return f"""
[paddlex]
visualize = false

[models]
det = "{(args.models / "det").resolve()}"
rec = "{(args.models / "rec").resolve()}"

[engine]
gpu_backend = "{args.backend}"
cpu_backend = "{args.cpu_backend}"
precision = "{args.precision}"
cpu_threads = {args.cpu_threads}

[engine.torch]
compile = "{args.torch_compile}"
shapes = "{args.torch_shapes}"

[workers]
devices = [{listed}]
gpu_instances = {args.gpu_instances}
cpu_workers = {args.cpu_workers}

[jobs]
data_dir = "{(args.out / "jobs").resolve()}"
"""


def app_config(args: argparse.Namespace) -> AppConfig:
    models = ModelsConfig(det=str(args.models / "det"), rec=str(args.models / "rec"))
    engine = dataclasses.replace(
        EngineConfig(),
        gpu_backend=args.backend,
        cpu_backend=args.cpu_backend if args.device == "cpu" else EngineConfig().cpu_backend,
        precision=args.precision if args.device != "cpu" else "fp32",
        cpu_threads=args.cpu_threads,
        torch=torch_options(args),
    )
    return AppConfig(models=models, engine=engine, workers=WorkersConfig(), paddlex=PaddlexConfig())


def torch_options(args: argparse.Namespace) -> TorchOptions:
    """`[engine.torch]` of the run (compiling takes minutes on a CPU: off there)."""
    compile_mode: TorchCompile = args.torch_compile if args.device != "cpu" else "off"
    return TorchOptions(compile=compile_mode, shapes=args.torch_shapes)


LAUNCH_SHAPES = {"det": (2, 3, 960, 960), "rec": (96, 3, 48, 1280)}
"""Large GPU batches (`[workers.gpu]` limits), where a launch that waits shows most."""


def launch_timing(args: argparse.Namespace, repeats: int = 5) -> dict[str, Any]:
    """Per model, the median time `launch` takes to return and the whole batch's (launch to
    result), on `LAUNCH_SHAPES`: a forward that reads the device back makes the first nearly
    the second (issue 27); a forward that only queues work returns in a small part of it. On
    the CPU both are the batch (it runs when issued)."""
    from models.spec import load_model_spec
    from models.torch_backend import TorchPredictor

    options = EngineOptions(
        device=args.device,
        precision=args.precision if args.device != "cpu" else "fp32",
        torch=torch_options(args),
    )
    rng = np.random.default_rng(0)
    result: dict[str, Any] = {}
    for kind, shape in LAUNCH_SHAPES.items():
        predictor = TorchPredictor(load_model_spec(args.models / kind, kind), options)
        predictor.load()
        if kind == "rec":
            predictor.output_argmax()
        batch = rng.uniform(-1, 1, shape).astype(np.float32)
        launch_ms, batch_ms = [], []
        for i in range(repeats + 1):
            slot = predictor.stage(shape)
            slot.input[...] = batch
            started = time.monotonic()
            predictor.launch(slot)
            launched = time.monotonic()
            slot.result()
            done = time.monotonic()
            slot.release()
            if i > 0:  # the first compiles and warms up
                launch_ms.append((launched - started) * 1000)
                batch_ms.append((done - started) * 1000)
        result[kind] = {
            "shape": list(shape),
            "host_reads_free": predictor.host_reads_free,
            "launch_ms": round(float(np.median(launch_ms)), 2),
            "batch_ms": round(float(np.median(batch_ms)), 2),
        }
        predictor.close()
    return result


def engine_limit(args: argparse.Namespace, images: list[np.ndarray]) -> dict[str, Any]:
    engine = LocalEngine(app_config(args), device=args.device)
    engine.load()
    recorder = Recorder(engine.predictors["det"])
    engine.predictors["det"] = recorder
    limit, texts = measure(engine, images, warmup=1, rounds=args.rounds)
    if 0 < limit.wall_s < args.min_seconds:  # a fast device: long enough to mean something
        rounds = math.ceil(args.rounds * args.min_seconds / limit.wall_s)
        limit, _ = measure(engine, images, warmup=0, rounds=rounds)
    np.savez(args.out / "det-maps.npz", **recorder.maps)  # type: ignore[arg-type]
    result: dict[str, Any] = {**dataclasses.asdict(limit), "texts": texts}
    for predictor in engine.predictors.values():
        predictor.close()
    try:
        import torch
    except ImportError:
        return result
    if torch.cuda.is_available():  # the server's workers need the memory next
        result["gpu_max_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        torch.cuda.empty_cache()
    return result


def cpu_texts(args: argparse.Namespace, images: list[np.ndarray]) -> list[list[str]]:
    """The same engine on this machine's CPU, what the device must read exactly: Paddle's texts
    were read where the bundle was made, with another OpenCV (OpenCV 5's `minAreaRect` gives the
    same rectangles as 4.x with width and height swapped, corners 1e-4 px apart, and crops that
    move a borderline character)."""
    config = app_config(argparse.Namespace(**{**vars(args), "device": "cpu"}))
    engine = LocalEngine(config, device="cpu")
    engine.load()
    texts = [[line.text for line in engine.ocr(image).lines] for image in images]
    for predictor in engine.predictors.values():
        predictor.close()
    return texts


def text_differences(
    pages: Sequence[str], want: Sequence[list[str]], got: Sequence[list[str]]
) -> list[dict[str, Any]]:
    """Each page whose line count differs, and each line read differently."""
    found: list[dict[str, Any]] = []
    for page, want_lines, got_lines in zip(pages, want, got, strict=True):
        if len(want_lines) != len(got_lines):
            found.append({"page": page, "lines": [len(want_lines), len(got_lines)]})
            continue
        found += [
            {"page": page, "line": i, "want": w, "got": g}
            for i, (w, g) in enumerate(zip(want_lines, got_lines, strict=True))
            if w != g
        ]
    return found


def read_with(pages: Path) -> dict[str, str] | None:
    """The versions that read the bundle's texts (`READ_WITH_FILE`), where recorded."""
    path = pages / READ_WITH_FILE
    return json.loads(path.read_text("utf-8")) if path.is_file() else None


def library_versions() -> dict[str, str]:
    """What the pipeline's numbers depend on, besides the engine."""
    import cv2

    versions = {"opencv": cv2.__version__, "numpy": np.__version__}
    try:
        import torch
    except ImportError:
        return versions
    return {**versions, "torch": torch.__version__}


def compare_texts(
    args: argparse.Namespace,
    images: list[np.ndarray],
    expected: dict[str, Any],
    read: list[list[str]],
) -> dict[str, Any]:
    """The device's texts against this machine's CPU (must be equal) and Paddle's (for
    information: another machine, other libraries)."""
    pages = list(expected)
    cpu = read if args.device == "cpu" else cpu_texts(args, images)
    paddle = [e["texts"] for e in expected.values()]
    vs_cpu = text_differences(pages, cpu, read)
    vs_paddle = text_differences(pages, paddle, read)
    return {
        "equal_to_cpu": not vs_cpu,
        "equal_to_paddle": not vs_paddle,
        "vs_cpu": vs_cpu,
        "vs_paddle": vs_paddle,
        "lines": sum(len(t) for t in read),
        "here": library_versions(),
        "paddle_read_with": read_with(args.pages),
    }


def level_requests(args: argparse.Namespace, concurrency: int, pace_pages_s: float) -> int:
    """Requests a level measures: `--requests`, at least two a client, and about
    `--level-seconds` at `pace_pages_s`, the engine limit (on a GPU, 64 requests are over in
    seconds)."""
    return int(max(args.requests, 2 * concurrency, math.ceil(pace_pages_s * args.level_seconds)))


def serve_levels(
    args: argparse.Namespace,
    name: str,
    devices: Sequence[str],
    levels: Sequence[int],
    *,
    pace_pages_s: float,
    backend: str | None = None,
) -> dict[str, Any]:
    """Start the server, run each concurrency level (`level_requests`), stop it."""
    out = args.out / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "server.toml").write_text(config_toml(args, devices))
    port = servers.free_port()
    call = (
        f"main(['--config', {str(out / 'server.toml')!r}, '--port', '{port}'], backend={backend!r})"
    )
    argv = [sys.executable, "-c", f"import sys; from serving.cli import main; sys.exit({call})"]
    env = {REPLAY_ENV: str((args.out / "det-maps.npz").resolve())}
    server = servers.start(name, argv, port, out / "server.log", env)
    documents = load_documents([args.pages])
    result: dict[str, Any] = {"devices": list(devices), "backend": backend or args.backend}
    try:
        with GpuMemory() as memory:
            result["ready_s"] = round(
                server.wait_ready("/readyz", timeout_s=args.ready_timeout_s), 1
            )
            runs = []
            for concurrency in levels:
                level = asyncio.run(
                    run_level(
                        server.url,
                        "paddlex",
                        documents,
                        concurrency=concurrency,
                        requests=level_requests(args, concurrency, pace_pages_s),
                        warmup=min(concurrency, len(documents)),
                        timeout_s=args.request_timeout_s,
                    )
                )
                runs.append(dataclasses.asdict(level))
            result["levels"] = runs
        result["gpu_memory_peak_mib"] = memory.peak_mib
        result["server_rss_peak_mib"] = round(server.memory.peak_bytes / 2**20, 1)
    finally:
        server.stop()
    return result


def summary(report: dict[str, Any]) -> dict[str, Any]:
    limit = report["engine_limit"]["pages_per_s"]
    cpu_side = report.get("cpu_side", {}).get("levels", [{}])[-1].get("throughput_pages_s")
    levels = report.get("server", {}).get("levels", [])
    top = levels[-1]["throughput_pages_s"] if levels else None
    bound = min(v for v in (limit, cpu_side) if v) if (limit or cpu_side) else None
    ratio = round(top / bound, 3) if top and bound else None
    return {
        "engine_limit_pages_s": limit,
        "cpu_side_limit_pages_s": cpu_side,
        "server_top_pages_s": top,
        "ratio_to_bound": ratio,
        "meets_0_8": ratio is not None and ratio >= 0.8,
        "texts_equal_to_cpu": report["texts"]["equal_to_cpu"],
    }


def _fmt(value: Any) -> str:
    """A figure for the Markdown table: floats to three significant digits, absent as '-'."""
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = [
        f"# GPU check ({report['device']}, {report['backend']}, {report['precision']})",
        "",
        f"- engine limit: {_fmt(s['engine_limit_pages_s'])} pages/s (GPU memory allocated in "
        f"process: {_fmt(report['engine_limit'].get('gpu_max_allocated_mib'))} MiB)",
        f"- CPU-side limit: {_fmt(s['cpu_side_limit_pages_s'])} pages/s "
        f"({report['cpu_workers']} CPU workers, device answers replayed)",
        f"- server at the highest concurrency: {_fmt(s['server_top_pages_s'])} pages/s = "
        f"{_fmt(s['ratio_to_bound'])} x min(engine limit, CPU-side limit) "
        f"({'meets' if s['meets_0_8'] else 'below'} 0.8)",
        "",
        "| run | devices | concurrency | pages/s | p50 s | p95 s | det mean batch | rec mean batch "
        "| rec batch histogram | GPU MiB peak |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("server", "mixed", "cpu_side"):
        run = report.get(name)
        if not run:
            continue
        for level in run["levels"]:
            stages = level.get("metrics") or {}
            det = (stages.get("det") or {}).get("mean_batch_size")
            rec = stages.get("rec") or {}
            hist = " ".join(
                f"{k}:{v}" for k, v in (rec.get("batch_size_histogram") or {}).items() if v
            )
            lines.append(
                f"| {name} | {', '.join(run['devices'])} | {level['concurrency']} | "
                f"{_fmt(level['throughput_pages_s'])} | {_fmt(level['p50_s'])} | "
                f"{_fmt(level['p95_s'])} | {_fmt(det)} | {_fmt(rec.get('mean_batch_size'))} | "
                f"{hist or '-'} | {_fmt(run.get('gpu_memory_peak_mib'))} |"
            )
    for kind, timing in report.get("launch", {}).items():
        lines.append(
            f"- {kind} launch returns in {_fmt(timing['launch_ms'])} ms of a "
            f"{_fmt(timing['batch_ms'])} ms batch {tuple(timing['shape'])} "
            f"(host reads free: {timing['host_reads_free']})"
        )
    errors = [
        f"- the {name} run failed: {error}" for name, error in report.get("errors", {}).items()
    ]
    return "\n".join([*lines, "", *texts_markdown(report["texts"]), "", *errors, ""])


def texts_markdown(texts: dict[str, Any]) -> list[str]:
    def listed(differences: list[dict[str, Any]]) -> list[str]:
        return [
            f"  - {d['page']}: {d['lines'][0]} lines, read {d['lines'][1]}"
            if "lines" in d
            else f"  - {d['page']} line {d['line']}: {d['want']!r} read {d['got']!r}"
            for d in differences[:10]
        ]

    here = ", ".join(f"{k} {v}" for k, v in texts["here"].items())
    there = texts["paddle_read_with"]
    there_s = ", ".join(f"{k} {v}" for k, v in there.items()) if there else "not recorded"
    return [
        f"Texts of the engine limit run ({texts['lines']} lines; {here}):",
        f"- equal to the same engine on this machine's CPU: {texts['equal_to_cpu']}",
        *listed(texts["vs_cpu"]),
        f"- equal to Paddle's, read where the bundle was made ({there_s}): "
        f"{texts['equal_to_paddle']}",
        *listed(texts["vs_paddle"]),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.gpu_check", description=__doc__)
    parser.add_argument("--models", type=Path, required=True, help="folder with det/ and rec/")
    parser.add_argument("--pages", type=Path, required=True, help="PNGs and expected.json")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="gpu:0", help='"gpu:N", or "cpu" for a dry run')
    parser.add_argument("--backend", default="torch", help="engine.gpu_backend")
    parser.add_argument("--cpu-backend", default="torch", help="the mixed run's CPU worker")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "fp16"))
    parser.add_argument("--torch-compile", default="off", choices=TORCH_COMPILE_MODES)
    parser.add_argument("--torch-shapes", default="exact", choices=TORCH_SHAPES)
    parser.add_argument("--concurrency", default="1,8,32", help="levels, comma-separated")
    parser.add_argument("--requests", type=int, default=64, help="measured requests a level")
    parser.add_argument("--rounds", type=int, default=2, help="engine-limit passes over the pages")
    parser.add_argument(
        "--min-seconds", type=float, default=10.0, help="more engine-limit passes until this long"
    )
    parser.add_argument(
        "--level-seconds", type=float, default=15.0, help="a level's length at the engine limit"
    )
    parser.add_argument("--gpu-instances", type=int, default=1)
    parser.add_argument("--cpu-workers", type=int, default=0, help="0 = the number of cores")
    parser.add_argument("--cpu-threads", type=int, default=0)
    parser.add_argument("--skip", default="", help="comma-separated: launch,mixed,cpu_side")
    parser.add_argument("--ready-timeout-s", type=float, default=300.0)
    parser.add_argument("--request-timeout-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",") if c]
    if not levels or min(levels) < 1:
        parser.error("--concurrency needs positive integers")
    if not (args.models / "det").is_dir() or not (args.pages / "expected.json").is_file():
        parser.error("--models needs det/ and rec/, --pages an expected.json (make gpu-bundle)")
    skip = set(filter(None, args.skip.split(",")))
    args.out.mkdir(parents=True, exist_ok=True)
    expected = json.loads((args.pages / "expected.json").read_text("utf-8"))
    import cv2

    images = [cv2.imread(str(args.pages / e["file"]), cv2.IMREAD_COLOR) for e in expected.values()]
    started = time.monotonic()
    report: dict[str, Any] = {
        "device": args.device,
        "backend": args.backend,
        "precision": args.precision,
        "torch": {"compile": args.torch_compile, "shapes": args.torch_shapes},
        "cpu_workers": args.cpu_workers or os.cpu_count(),
        "pages": list(expected),
    }
    if args.backend == "torch" and "launch" not in skip:
        try:
            report["launch"] = launch_timing(args)
        except Exception as err:  # the engine limit and the server runs still tell something
            report.setdefault("errors", {})["launch"] = f"{type(err).__name__}: {err}"
    report["engine_limit"] = engine_limit(args, images)
    report["texts"] = compare_texts(args, images, expected, report["engine_limit"]["texts"])
    pace = float(report["engine_limit"]["pages_per_s"])
    save(report, args.out, started)
    # The ratio's two runs first: on a machine lent for minutes, a run cut short still reports.
    runs: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("server", lambda: serve_levels(args, "server", [args.device], levels, pace_pages_s=pace)),
        (
            "cpu_side",
            lambda: serve_levels(
                args,
                "cpu_side",
                [args.device],
                levels[-1:],
                pace_pages_s=pace,
                backend="loadtest.gpu_check:REPLAY",
            ),
        ),
        (
            "mixed",
            lambda: serve_levels(
                args, "mixed", [args.device, "cpu"], levels[-1:], pace_pages_s=pace
            ),
        ),
    ]
    for name, run in runs:
        if name in skip or (name == "mixed" and args.device == "cpu"):
            continue
        try:
            report[name] = run()
        except Exception as err:  # the other runs still tell something
            report.setdefault("errors", {})[name] = f"{type(err).__name__}: {err}"
            print(f"gpu_check: the {name} run failed: {err}", file=sys.stderr)
        save(report, args.out, started)
    print(markdown(report))
    return 1 if report.get("errors") else 0


def save(report: dict[str, Any], out: Path, started: float) -> None:
    """Write gpu-check.json and gpu-check.md with the runs so far."""
    report["summary"] = summary(report)
    report["wall_s"] = round(time.monotonic() - started, 1)
    (out / "gpu-check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "gpu-check.md").write_text(markdown(report))


if __name__ == "__main__":
    sys.exit(main())
