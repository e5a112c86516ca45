"""The GPU check's short benchmark (`scripts/gpu-check.sh` runs it on the GPU machine).

Parts, in this order (what matters first), within `--budget-s` in all; a part that the time
left cannot hold is skipped and reported as skipped, and the results are saved after each:

1. `syncs`: host synchronisations per det and rec forward and per `launch` of uint8 pixels,
   counted under `torch.cuda.set_sync_debug_mode("warn")`, and whether one raises under "error"
   (`loadtest.gpu.probes`);
2. `overlap`: the compute stream's busy share of a steady window with two server-sized uint8
   batches in flight, from CUDA events (`loadtest.gpu.overlap`; >= 90% passes; not measured on
   the CPU);
3. `engine_limit`: the GPU engine limit, the device work alone: the pages' det and rec inputs
   (uint8, in the pipeline's bucketed shapes) grouped into the server's batches and replayed
   through `stage_pixels` with the lane's batches in flight (`loadtest.gpu.device_batches`);
   and, for information, the pipeline in one process (CPU work inline), which also records the
   detection maps `REPLAY` answers with;
4. `server`: the server on [device] at each `--concurrency` (32, 64, 128) at or below its
   `/readyz` admission: pages/s, p50/p95, mean det and rec rows a batch (/metrics), the fraction
   of time the GPU is busy (NVML, nvidia-smi or `torch.cuda.utilization`; else "not
   measured"), peak GPU memory;
5. `cpu_side`: the CPU-side limit, the same server whose device answers instantly with the
   recorded maps (`REPLAY`), so pages/s is what its CPU workers can prepare;
6. `mixed`: the server on [device, "cpu"] at the highest concurrency;
7. `texts`: the pages' texts against the same engine on this machine's CPU at the same
   (bucketed) batching: equal in fp32, within `FP16_CER_MAX` in fp16 (and Paddle's);
8. `launch`: how long a launch takes to return, against its batch;
9. `warmup`: each model's load and warm-up (compile) time.

The ratio the issue asks for: server pages/s at the highest concurrency over min(GPU engine
limit, CPU-side limit). `--out` gets `OUT_FILES` only (the device tool returns at most 8 files);
configs, logs, maps and the jobs' databases stay in `--work`. On a machine without a GPU it runs
the same steps on `--device cpu` with tiny settings (a dry run; its figures mean nothing).
`--merge-tests JUNIT` adds tests/gpu's outcomes (skipped ones as skipped, `NOT_APPLICABLE` ones
apart) to a saved report.
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
import tempfile
import threading
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from loadtest import servers
from loadtest.documents import load_documents
from loadtest.gpu.device_batches import (
    PageCalls,
    in_flight,
    page_calls,
    replay,
    server_batches,
)
from loadtest.gpu.probes import (
    launch_timing,
    overlap_check,
    run_precision,
    sync_counts,
    torch_options,
    warmup_timing,
)
from loadtest.run import run_level
from models.base import EngineBackend, Predictor
from models.engine_options import DEVICE_KINDS, EngineOptions
from models.fake_predictor import FakePredictor
from models.spec import MODEL_FORMATS, ModelSpec
from models.torch_options import TORCH_COMPILE_MODES, TORCH_SHAPES
from serving.config import (
    AppConfig,
    EngineConfig,
    ModelsConfig,
    PaddlexConfig,
    StageLimits,
    WorkersConfig,
)
from serving.cpus import available_cpus
from serving.engine.choice import model_stages
from serving.engine.local import LocalEngine
from serving.request_options import OcrOptions, ocr_options
from serving.scheduling.batch_shapes import BatchShapes

READ_WITH_FILE = "read-with.json"
"""Beside the bundle's expected.json: the versions of Paddle, OpenCV and numpy that read it."""
REPLAY_ENV = "OCR_REPLAY_DET_MAPS"
"""The .npz of detection maps by input shape that `REPLAY` answers with."""
OUT_FILES = ("gpu-check.json", "gpu-check.md", "logs.txt")
"""All the check writes to `--out`, the summaries first; scripts/gpu-check.sh adds env.json,
gpu-tests.log and bench.log: 6 of the 8 files the device tool returns."""
FP16_CER_MAX = 0.001
"""How far fp16's texts may read from the CPU's fp32 ones (0.1 CER points, the bound the issue
sets bf16 on the CPU); fp32 must read them exactly."""
LOG_TAIL_BYTES = 128 << 10
"""The end of each server's log that logs.txt keeps."""
LOGS_MAX_BYTES = 1 << 20
"""logs.txt at most (the device tool returns 16 MiB a file, 64 MiB in all)."""
PART_MIN_S = {
    "syncs": 15.0,
    "overlap": 15.0,
    "engine_limit": 30.0,
    "server": 60.0,
    "cpu_side": 40.0,
    "mixed": 40.0,
    "texts": 20.0,
    "launch": 15.0,
    "warmup": 15.0,
}
"""The parts in order, each with the time it needs at least: one that cannot have it is
skipped (reported as skipped) so the check ends within `--budget-s`."""


class ReplayDet:
    """Answers each det batch with a recorded real map for the same input shape (nearest shape
    otherwise), so the CPU stages see real boxes, at no device cost."""

    reads_text = False  # the warm-up page's text is not checked (`serving.engine.warmup`)

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


class GpuSampler:
    """While open, samples GPU 0's utilisation (the share of time a kernel ran) and memory
    every `interval_s`: through NVML (pynvml) where importable, else nvidia-smi, else
    `torch.cuda.utilization`; `result()` says which, or "not measured"."""

    def __init__(self, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self.busy: list[float] = []
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.source, self._sample = self._pick()

    @staticmethod
    def _pick() -> tuple[str, Callable[[], tuple[float | None, float | None]] | None]:
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # not installed, or no driver
            pass
        else:

            def nvml() -> tuple[float | None, float | None]:
                util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
                used = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
                return float(util), float(used)

            return "nvml", nvml
        smi = shutil.which("nvidia-smi")
        if smi:
            argv = [smi, "-i", "0", "--query-gpu=utilization.gpu,memory.used"]
            argv.append("--format=csv,noheader,nounits")

            def nvidia_smi() -> tuple[float | None, float | None]:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=5).stdout
                util, used = (float(v) for v in out.split(",")[:2])
                return util, used

            return "nvidia-smi", nvidia_smi
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.utilization(0)

                def torch_util() -> tuple[float | None, float | None]:
                    return float(torch.cuda.utilization(0)), None

                return "torch.cuda.utilization", torch_util
        except Exception:  # torch without the NVML it reads through
            pass
        return "not measured", None

    def __enter__(self) -> GpuSampler:
        if self._sample is not None:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        sample = self._sample
        while sample is not None and not self._stop.wait(self.interval_s):
            try:
                util, used = sample()
            except Exception:  # a sample lost is not a run lost
                continue
            if util is not None:
                self.busy.append(util)
            if used is not None:
                self.peak_mib = max(self.peak_mib or 0.0, used)

    def result(self) -> dict[str, Any]:
        busy = round(float(np.mean(self.busy)) / 100, 3) if self.busy else None
        return {
            "gpu_busy_fraction": busy,
            "gpu_busy_source": self.source,
            "gpu_memory_peak_mib": self.peak_mib,
        }


def config_toml(args: argparse.Namespace, devices: Sequence[str]) -> str:
    """The server's config for one run."""
    listed = ", ".join(f'"{d}"' for d in devices)
    # A dry run's CPU device (its only one) stands for the GPU: as many device workers as
    # --gpu-instances (the CPU's default, two, only doubled each of its servers' start-up); a
    # mixed run's CPU device keeps the default.
    alone = list(devices) == ["cpu"]
    cpu_instances = args.gpu_instances if alone else WorkersConfig().cpu_instances
    return f"""
[paddlex]
visualize = false

[models]
det = "{(args.models / "det").resolve()}"
rec = "{(args.models / "rec").resolve()}"
ori = ""  # the bundle's det and rec alone: what Paddle read its pages with (tests/gpu/bundle.py)
sets = {{}}

[engine]
gpu_backend = "{args.backend}"
cpu_backend = "{args.cpu_backend}"
precision = "{args.precision}"
cpu_threads = {args.cpu_threads}
batching = "bucketed"  # what a GPU server runs ("auto"), on the dry run's CPU too: the engine
                       # limit's batches and the texts compared are bucketed (`read_pages`)

[engine.torch]
compile = "{args.torch_compile}"
shapes = "{args.torch_shapes}"

[workers]
devices = [{listed}]
gpu_instances = {args.gpu_instances}
cpu_instances = {cpu_instances}
cpu_workers = {args.cpu_workers}

[jobs]
data_dir = "{(args.work / "jobs").resolve()}"
"""


def app_config(args: argparse.Namespace) -> AppConfig:
    models = ModelsConfig(
        det=str(args.models / "det"), rec=str(args.models / "rec"), ori="", sets={}
    )  # the bundle's det and rec alone, as `config_toml`'s
    engine = dataclasses.replace(
        EngineConfig(),
        gpu_backend=args.backend,
        cpu_backend=args.cpu_backend if args.device == "cpu" else EngineConfig().cpu_backend,
        precision=args.precision if args.device != "cpu" else "fp32",
        cpu_threads=args.cpu_threads,
        batching="bucketed",
        torch=torch_options(args),
    )
    return AppConfig(models=models, engine=engine, workers=WorkersConfig(), paddlex=PaddlexConfig())


def gpu_limits(args: argparse.Namespace) -> dict[str, StageLimits]:
    """The det and rec batch limits of the device the server runs on (`[workers.gpu]` or
    `[workers.cpu]`, the check's server config sets neither)."""
    workers = WorkersConfig()
    limits = workers.cpu if args.device == "cpu" else workers.gpu
    return {"det": limits.det, "rec": limits.rec}


def bucketed_options(engine: LocalEngine) -> OcrOptions:
    """The page options of bucketed batching (what the check's server runs: `config_toml`)."""
    shapes = BatchShapes.of("bucketed", engine.config.engine.torch)
    if shapes is None:  # pragma: no cover - "bucketed" always has shapes
        raise ValueError("bucketed batching without shapes")
    return ocr_options(engine.bundle, engine.config.pipeline, shapes=shapes)


def read_pages(engine: LocalEngine, images: Sequence[np.ndarray]) -> list[PageCalls]:
    """Each page read in process with bucketed batching, every model call's uint8 input kept
    (`device_batches.page_calls`)."""
    predictors = {stage: engine.predictors[stage] for stage in ("det", "rec")}
    stages = model_stages(predictors)
    options = bucketed_options(engine)
    charset = engine.bundle.charset
    return [page_calls(predictors, stages, image, options, charset) for image in images]


def engine_limit(
    args: argparse.Namespace, images: list[np.ndarray], share_s: float
) -> dict[str, Any]:
    """The GPU engine limit within about `share_s`: the pages' det and rec inputs, as uint8
    pixels in the real pipeline's bucketed shapes, as many copies of each as a det batch holds
    (`device_batches.in_flight`: the server at high concurrency over a few pages), grouped into
    the server's batches
    (`device_batches.server_batches` with `gpu_limits`) and replayed on the device alone
    (`device_batches.replay`); and, for information, the pipeline in one process (CPU work
    inline, one page at a time). Writes the det maps `REPLAY` answers with."""
    engine = LocalEngine(app_config(args), device=args.device)
    engine.load()
    read_pages(engine, images[:1])  # warm-up page, not timed
    started = time.monotonic()
    pages = read_pages(engine, images)
    wall = time.monotonic() - started
    maps = {key: m for page in pages for key, m in page.maps.items()}
    np.savez(args.work / "det-maps.npz", **maps)  # type: ignore[arg-type]
    limits = gpu_limits(args)
    copies = limits["det"].max_batch_size  # a det batch's pages (1 on the CPU)
    calls = in_flight([page.calls for page in pages], copies)
    batches = server_batches(calls, limits)
    predictors = {stage: engine.predictors[stage] for stage in ("det", "rec")}
    min_s = min(args.min_seconds, share_s / 3)
    result: dict[str, Any] = {
        "gpu": {
            **replay(predictors, batches, copies * len(images), min_s),
            "copies_of_each_page": copies,
            "calls_one_page_at_a_time": len(calls),
            "limits": {k: dataclasses.asdict(v) for k, v in gpu_limits(args).items()},
        },
        "pipeline": {"pages_per_s": round(len(images) / wall, 4) if wall else None},
        "batching": "bucketed",
        "texts": [page.texts for page in pages],
    }
    for predictor in predictors.values():
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
    """The same engine on this machine's CPU at the same batching (bucketed, as the device's
    texts were read: `read_pages`), what the device must read exactly in fp32: Paddle's texts
    were read where the bundle was made, in exact mode and with another OpenCV (OpenCV 5's
    `minAreaRect` gives the same rectangles as 4.x with width and height swapped, corners 1e-4
    px apart, and crops that move a borderline character)."""
    config = app_config(argparse.Namespace(**{**vars(args), "device": "cpu"}))
    engine = LocalEngine(config, device="cpu")
    engine.load()
    texts = [page.texts for page in read_pages(engine, images)]
    for predictor in engine.predictors.values():
        predictor.close()
    return texts


def cer(want: Sequence[list[str]], got: Sequence[list[str]]) -> float | None:
    """Character error rate of `got` against `want`, pages' lines joined by newlines: edit
    distance over `want`'s characters (None where rapidfuzz is missing or nothing was read)."""
    try:
        from rapidfuzz.distance import Levenshtein
    except ImportError:
        return None
    pairs = ["\n".join(w) for w in want], ["\n".join(g) for g in got]
    chars = sum(len(w) for w in pairs[0])
    if not chars:
        return None
    errors = sum(Levenshtein.distance(w, g) for w, g in zip(*pairs, strict=True))
    return round(errors / chars, 5)


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
    """The device's texts against this machine's CPU at the same batching (bucketed both):
    equal in fp32, within `FP16_CER_MAX` in fp16 (`texts_pass`); and Paddle's (for information:
    exact batching, another machine, other libraries)."""
    pages = list(expected)
    cpu = read if args.device == "cpu" else cpu_texts(args, images)
    paddle = [e["texts"] for e in expected.values()]
    vs_cpu = text_differences(pages, cpu, read)
    vs_paddle = text_differences(pages, paddle, read)
    cer_vs_cpu = cer(cpu, read)
    fp16 = run_precision(args) == "fp16"
    return {
        "batching": "bucketed",
        "equal_to_cpu": not vs_cpu,
        "cer_vs_cpu": cer_vs_cpu,
        "passes": (not vs_cpu) or (fp16 and cer_vs_cpu is not None and cer_vs_cpu <= FP16_CER_MAX),
        "rule": f"within {FP16_CER_MAX} CER of the CPU's (fp16)" if fp16 else "equal (fp32)",
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


def levels_within(levels: Sequence[int], max_pages: int | None) -> tuple[list[int], list[int]]:
    """The concurrency levels at or below the server's admission (`/readyz`'s
    `admission.max_pages`: one page a request here), and those above it, which would measure
    503s (issue 40: the headline ran at 128 where 64 pages were admitted); all of them where
    the server does not say."""
    if not max_pages:
        return list(levels), []
    return [c for c in levels if c <= max_pages], [c for c in levels if c > max_pages]


def serve_levels(
    args: argparse.Namespace,
    name: str,
    devices: Sequence[str],
    levels: Sequence[int],
    *,
    pace_pages_s: float,
    budget: Budget,
    logs: dict[str, str],
    backend: str | None = None,
) -> dict[str, Any]:
    """Start the server, run each concurrency level (`level_requests`) that the budget leaves
    time for, stop it; the end of its log goes to `logs`."""
    work = args.work / name
    work.mkdir(parents=True, exist_ok=True)
    (work / "server.toml").write_text(config_toml(args, devices))
    port = servers.free_port()
    config = str(work / "server.toml")
    call = f"main(['--config', {config!r}, '--port', '{port}'], backend={backend!r})"
    argv = [sys.executable, "-c", f"import sys; from serving.cli import main; sys.exit({call})"]
    env = {REPLAY_ENV: str((args.work / "det-maps.npz").resolve())}
    server = servers.start(name, argv, port, work / "server.log", env)
    documents = load_documents([args.pages / e["file"] for e in args.expected.values()])
    result: dict[str, Any] = {"devices": list(devices), "backend": backend or args.backend}
    try:
        ready_s = server.wait_ready("/readyz", timeout_s=min(args.ready_timeout_s, budget.left_s()))
        result["ready_s"] = round(ready_s, 1)
        ready = httpx.get(f"{server.url}/readyz", timeout=10).json()
        result["admission"] = ready.get("admission")
        result["ready_devices"] = ready.get("devices")
        result["batching"] = ready.get("batching")
        levels, over = levels_within(levels, (ready.get("admission") or {}).get("max_pages"))
        if over:
            result["over_admission"] = over
        runs = []
        for concurrency in levels:
            if budget.left_s() < args.level_seconds:
                result.setdefault("skipped_levels", []).append(concurrency)
                continue
            with GpuSampler() as gpu:
                level = asyncio.run(
                    run_level(
                        server.url,
                        "paddlex",
                        documents,
                        concurrency=concurrency,
                        requests=level_requests(args, concurrency, pace_pages_s),
                        warmup=min(concurrency, len(documents)),
                        timeout_s=min(args.request_timeout_s, budget.left_s()),
                    )
                )
            runs.append({**dataclasses.asdict(level), **gpu.result()})
        result["levels"] = runs
        result["server_rss_peak_mib"] = round(server.memory.peak_bytes / 2**20, 1)
    finally:
        server.stop()
        logs[name] = log_tail(work / "server.log")
    return result


def log_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last `limit` bytes of a log, from a line start."""
    if not path.is_file():
        return "(no log)\n"
    with path.open("rb") as log:
        log.seek(max(0, path.stat().st_size - limit))
        data = log.read()
    if len(data) == limit:
        data = data[data.find(b"\n") + 1 :]
    return data.decode("utf-8", "replace")


@dataclasses.dataclass
class Budget:
    """The check's time: parts start only while their `PART_MIN_S` is left."""

    total_s: float
    started: float = dataclasses.field(default_factory=time.monotonic)

    def left_s(self) -> float:
        return self.total_s - (time.monotonic() - self.started)


def _top(run: dict[str, Any] | None) -> float | None:
    levels = (run or {}).get("levels") or []
    return levels[-1]["throughput_pages_s"] if levels else None


def overlap_verdict(overlap: dict[str, Any] | None) -> str:
    """The overlap part in words: "passed", "FAILED", "not measured" (a CPU run), or "not run"."""
    if not overlap:
        return "not run"
    if not overlap.get("measured"):
        return "not measured"
    return "passed" if overlap.get("passes") else "FAILED"


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """The headline: the server at its highest concurrency over min(GPU engine limit, CPU-side
    limit), both limits measured apart (the one-process pipeline is not a bound: it does the CPU
    work inline)."""
    limits = report.get("engine_limit") or {}
    gpu = (limits.get("gpu") or {}).get("pages_per_s")
    cpu_side = _top(report.get("cpu_side"))
    top = _top(report.get("server"))
    bound = min(v for v in (gpu, cpu_side) if v) if (gpu or cpu_side) else None
    ratio = round(top / bound, 3) if top and bound else None
    syncs = report.get("syncs") or {}
    tests = report.get("tests") or {}
    return {
        "gpu_engine_limit_pages_s": gpu,
        "pipeline_one_process_pages_s": (limits.get("pipeline") or {}).get("pages_per_s"),
        "cpu_side_limit_pages_s": cpu_side,
        "server_top_pages_s": top,
        "ratio_to_bound": ratio,
        "bound_complete": bool(gpu and cpu_side),
        "meets_0_8": ratio is not None and ratio >= 0.8 and bool(gpu and cpu_side),
        "syncs_per_forward": {
            k: v.get("syncs_per_forward") for k, v in syncs.items() if isinstance(v, dict)
        },
        "syncs_per_launch_uint8": {
            k: v.get("syncs_per_launch_uint8") for k, v in syncs.items() if isinstance(v, dict)
        },
        "overlap": overlap_verdict(report.get("overlap")),
        "levels_over_admission": (report.get("server") or {}).get("over_admission", []),
        "texts_equal_to_cpu": (report.get("texts") or {}).get("equal_to_cpu"),
        "texts_pass": (report.get("texts") or {}).get("passes"),
        "precision_served": precision_served(report.get("server")),
        "skipped": sorted(report.get("skipped", {})),
        "tests": tests.get("verdict", "not run"),
    }


def precision_served(server: dict[str, Any] | None) -> dict[str, str]:
    """Each device worker's precision and why, as the server's `/readyz` said it ("auto"
    resolved, or fallen back to fp32 where the warm-up page read wrong at fp16)."""
    devices = (server or {}).get("ready_devices") or {}
    return {
        name: f"{device.get('precision', '?')} ({device.get('precision_reason', '?')})"
        for name, device in devices.items()
        if isinstance(device, dict)
    }


def _fmt(value: Any) -> str:
    """A figure for the Markdown table: floats to three significant digits, absent as '-'."""
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def overlap_figures(overlap: dict[str, Any] | None) -> str:
    """Each model's busy share and median compute, for the Markdown line."""
    if not overlap or not overlap.get("measured"):
        return f" ({overlap['why']})" if overlap and overlap.get("why") else ""
    figures = [
        f"{kind} {_fmt(o['busy_fraction'])} of {_fmt(o['compute_ms'])} ms batches"
        for kind, o in overlap.items()
        if isinstance(o, dict)
    ]
    return f" ({', '.join(figures)})"


def texts_verdict(texts: dict[str, Any] | None) -> str:
    if not texts:
        return "not compared"
    passed = "passed" if texts.get("passes") else "FAILED"
    return f"{passed} ({texts.get('rule', '-')}; CER {_fmt(texts.get('cer_vs_cpu'))})"


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    limits = report.get("engine_limit") or {}
    gpu = limits.get("gpu") or {}
    lines = [
        f"# GPU check ({report['device']}, {report['backend']}, {report['precision']}"
        f" -> {report.get('precision_resolved', '?')})",
        "",
        f"- precision the server's workers run at, and why: {s.get('precision_served') or '-'}",
        "- host syncs per forward: "
        + (", ".join(f"{k} {_fmt(v)}" for k, v in s["syncs_per_forward"].items()) or "-")
        + "; per launch of uint8 pixels: "
        + (", ".join(f"{k} {_fmt(v)}" for k, v in s["syncs_per_launch_uint8"].items()) or "-"),
        f"- compute stream busy with two batches in flight (>= 90% of a steady window): "
        f"{s['overlap']}{overlap_figures(report.get('overlap'))}",
        f"- GPU engine limit (device work alone, the server's batches: "
        f"{gpu.get('batches_a_round', '-')} a round of {gpu.get('calls_one_page_at_a_time', '-')} "
        f"page calls, rows a batch {gpu.get('rows_a_batch', '-')}, uint8 in "
        f"{gpu.get('uint8_in', '-')}, shapes {report['torch']['shapes']}): "
        f"{_fmt(s['gpu_engine_limit_pages_s'])} pages/s",
        f"- pipeline in one process (CPU work inline, not a bound): "
        f"{_fmt(s['pipeline_one_process_pages_s'])} pages/s (GPU memory allocated in process: "
        f"{_fmt(limits.get('gpu_max_allocated_mib'))} MiB)",
        f"- CPU-side limit: {_fmt(s['cpu_side_limit_pages_s'])} pages/s "
        f"({report['cpu_workers']} CPU workers, device answers replayed)",
        f"- server at the highest concurrency: {_fmt(s['server_top_pages_s'])} pages/s = "
        f"{_fmt(s['ratio_to_bound'])} x min(GPU engine limit, CPU-side limit) "
        f"({'meets' if s['meets_0_8'] else 'does not meet'} 0.8"
        f"{'' if s['bound_complete'] else '; a limit is missing'})",
        f"- texts against the CPU's, both bucketed: {texts_verdict(report.get('texts'))}",
        f"- server levels above admission (not run): "
        f"{', '.join(map(str, s['levels_over_admission'])) or 'none'}",
        f"- tests/gpu: {s['tests']}",
        f"- skipped: {', '.join(s['skipped']) or 'nothing'}",
        "",
        "| run | devices | concurrency | pages/s | p50 s | p95 s | det rows/batch | "
        "rec rows/batch | GPU busy | GPU MiB peak |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("server", "cpu_side", "mixed"):
        run = report.get(name)
        if not run:
            continue
        for level in run.get("levels", []):
            stages = level.get("metrics") or {}
            det = (stages.get("det") or {}).get("mean_batch_size")
            rec = (stages.get("rec") or {}).get("mean_batch_size")
            busy = level.get("gpu_busy_fraction")
            lines.append(
                f"| {name} | {', '.join(run['devices'])} | {level['concurrency']} | "
                f"{_fmt(level['throughput_pages_s'])} | {_fmt(level['p50_s'])} | "
                f"{_fmt(level['p95_s'])} | {_fmt(det)} | {_fmt(rec)} | "
                f"{_fmt(busy) if busy is not None else 'not measured'} | "
                f"{_fmt(level.get('gpu_memory_peak_mib'))} |"
            )
    for kind, timing in report.get("launch", {}).items():
        lines.append(
            f"- {kind} launch returns in {_fmt(timing['launch_ms'])} ms of a "
            f"{_fmt(timing['batch_ms'])} ms batch {tuple(timing['shape'])} "
            f"(host reads free: {timing['host_reads_free']})"
        )
    for kind, entry in (report.get("syncs") or {}).items():
        if isinstance(entry, dict):
            lines.append(
                f"- {kind} forward {tuple(entry['shape'])}: "
                f"{_fmt(entry['syncs_per_forward'])} syncs, ran in {entry['output_dtype']}, "
                f"sync debug mode error: {entry.get('error_mode', 'not measured')}; launch of "
                f"uint8 pixels: {_fmt(entry.get('syncs_per_launch_uint8'))} syncs, error mode: "
                f"{entry.get('launch_error_mode', 'not measured')}"
            )
    for kind, timing in (report.get("warmup") or {}).items():
        if isinstance(timing, dict):
            lines.append(
                f"- {kind} start-up (compile {report['warmup']['compile']}): load "
                f"{_fmt(timing['load_s'])} s, warm-up {_fmt(timing['warmup_s'])} s"
            )
    skipped = [f"- skipped {name}: {why}" for name, why in report.get("skipped", {}).items()]
    errors = [
        f"- the {name} run failed: {error}" for name, error in report.get("errors", {}).items()
    ]
    return "\n".join(
        [
            *lines,
            "",
            *texts_markdown(report.get("texts")),
            "",
            *tests_markdown(report),
            "",
            *skipped,
            *errors,
            "",
        ]
    )


def tests_markdown(report: dict[str, Any]) -> list[str]:
    tests = report.get("tests")
    if not tests:
        return ["tests/gpu: not run (or not merged)."]
    not_applicable = tests.get("not_applicable", {})
    return [
        f"tests/gpu: {len(tests['passed'])} passed, {len(tests['failed'])} failed, "
        f"{len(tests['skipped'])} skipped (a skip proves nothing), "
        f"{len(not_applicable)} not applicable: {tests['verdict']}",
        *(f"- failed {name}" for name in tests["failed"]),
        *(f"- skipped {name}: {why}" for name, why in tests["skipped"].items()),
        *(f"- not applicable {name}: {why}" for name, why in not_applicable.items()),
    ]


NOT_APPLICABLE = "not applicable:"
"""How a GPU test's skip reason starts where it cannot run on the GPU machine by design (the
Paddle smoke tests: the GPU bundle has no Paddle); such skips count as not applicable, not as
missing, so the verdict can be "passed"."""


def junit_outcomes(path: Path) -> dict[str, Any]:
    """tests/gpu's outcomes from pytest's JUnit XML: passed, failed, skipped with reasons, and
    not applicable (skipped with a reason that starts with `NOT_APPLICABLE`); the verdict is
    "passed" only when something passed, nothing failed and nothing was skipped otherwise."""
    passed: list[str] = []
    failed: list[str] = []
    skipped: dict[str, str] = {}
    not_applicable: dict[str, str] = {}
    if path.is_file():
        for case in ElementTree.parse(path).getroot().iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(name)
            elif (skip := case.find("skipped")) is not None:
                why = skip.get("message", "")[:200]
                (not_applicable if NOT_APPLICABLE in why else skipped)[name] = why
            else:
                passed.append(name)
    if failed:
        verdict = f"FAILED ({len(failed)})"
    elif not passed:
        verdict = "not run" if not skipped else f"incomplete: 0 passed, {len(skipped)} skipped"
    elif skipped:
        verdict = f"incomplete: {len(passed)} passed, {len(skipped)} skipped"
    else:
        verdict = "passed"
    return {
        "passed": passed,
        "failed": failed,
        "skipped": skipped,
        "not_applicable": not_applicable,
        "verdict": verdict,
    }


def texts_markdown(texts: dict[str, Any] | None) -> list[str]:
    if not texts:
        return ["Texts: not compared (see skipped)."]

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
    parser = argparse.ArgumentParser(prog="python -m loadtest.gpu", description=__doc__)
    parser.add_argument("--models", type=Path, help="folder with det/ and rec/")
    parser.add_argument("--pages", type=Path, help="PNGs and expected.json")
    parser.add_argument("--out", type=Path, required=True, help=f"gets {', '.join(OUT_FILES)}")
    parser.add_argument("--work", type=Path, help="configs, logs, maps (default: a temp dir)")
    parser.add_argument("--budget-s", type=float, default=300.0, help="the whole check's time")
    parser.add_argument("--merge-tests", type=Path, help="add this JUnit XML to --out's report")
    parser.add_argument("--device", default="gpu:0", help='"gpu:N", or "cpu" for a dry run')
    parser.add_argument("--backend", default="torch", help="engine.gpu_backend")
    parser.add_argument("--cpu-backend", default="torch", help="the mixed run's CPU worker")
    parser.add_argument(
        "--precision",
        default="auto",
        choices=("auto", "fp32", "fp16"),
        help='engine.precision ("auto", the default: fp16 on a GPU; fp32 where it reads wrong)',
    )
    parser.add_argument("--torch-compile", default="off", choices=TORCH_COMPILE_MODES)
    parser.add_argument("--torch-shapes", default="buckets", choices=TORCH_SHAPES)
    parser.add_argument("--concurrency", default="32,64,128", help="levels, comma-separated")
    parser.add_argument("--requests", type=int, default=64, help="measured requests a level")
    parser.add_argument("--rounds", type=int, default=2, help="most one-process pipeline passes")
    parser.add_argument(
        "--min-seconds", type=float, default=10.0, help="the GPU engine limit's length"
    )
    parser.add_argument(
        "--level-seconds", type=float, default=10.0, help="a level's length at the engine limit"
    )
    parser.add_argument("--max-pages", type=int, default=0, help="the first N pages; 0: all")
    parser.add_argument("--gpu-instances", type=int, default=1)
    parser.add_argument("--cpu-workers", type=int, default=0, help="0 = the number of cores")
    parser.add_argument("--cpu-threads", type=int, default=0)
    parser.add_argument("--skip", default="", help=f"comma-separated: {','.join(PART_MIN_S)}")
    parser.add_argument("--ready-timeout-s", type=float, default=180.0)
    parser.add_argument("--request-timeout-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    if args.merge_tests is not None:
        return merge_tests(args.out, args.merge_tests)
    levels = [int(c) for c in args.concurrency.split(",") if c]
    if not levels or min(levels) < 1:
        parser.error("--concurrency needs positive integers")
    if args.models is None or args.pages is None:
        parser.error("--models and --pages are needed (make gpu-bundle)")
    if not (args.models / "det").is_dir() or not (args.pages / "expected.json").is_file():
        parser.error("--models needs det/ and rec/, --pages an expected.json (make gpu-bundle)")
    skip = set(filter(None, args.skip.split(",")))
    args.out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    args.work.mkdir(parents=True, exist_ok=True)
    expected = json.loads((args.pages / "expected.json").read_text("utf-8"))
    if args.max_pages > 0:
        expected = dict(list(expected.items())[: args.max_pages])
    args.expected = expected
    import cv2

    images = [cv2.imread(str(args.pages / e["file"]), cv2.IMREAD_COLOR) for e in expected.values()]
    budget = Budget(args.budget_s)
    logs: dict[str, str] = {}
    report: dict[str, Any] = {
        "device": args.device,
        "backend": args.backend,
        "precision": args.precision,
        "precision_resolved": run_precision(args),
        "torch": {"compile": args.torch_compile, "shapes": args.torch_shapes},
        "cpu_workers": args.cpu_workers or available_cpus(),
        "budget_s": args.budget_s,
        "pages": list(expected),
        "work": str(args.work),
    }
    pace = 1.0

    def serve(name: str, devices: list[str], at: list[int], backend: str | None = None) -> Any:
        return serve_levels(
            args, name, devices, at, pace_pages_s=pace, budget=budget, logs=logs, backend=backend
        )

    parts: dict[str, Callable[[], Any]] = {
        "syncs": lambda: sync_counts(args),
        "overlap": lambda: overlap_check(args),
        "engine_limit": lambda: engine_limit(args, images, share_s=budget.left_s() / 4),
        "server": lambda: serve("server", [args.device], levels),
        "cpu_side": lambda: serve(
            "cpu_side", [args.device], levels[-1:], "loadtest.gpu.check:REPLAY"
        ),
        "mixed": lambda: serve("mixed", [args.device, "cpu"], levels[-1:]),
        "texts": lambda: compare_texts(args, images, expected, report["engine_limit"]["texts"]),
        "launch": lambda: launch_timing(args, repeats=1 if args.device == "cpu" else 5),
        "warmup": lambda: warmup_timing(args),
    }
    for name, part in parts.items():
        why = skip_reason(name, args, report, skip, budget.left_s())
        if why:
            report.setdefault("skipped", {})[name] = why
            continue
        started = time.monotonic()
        try:
            report[name] = part()
        except Exception as err:  # the other parts still tell something
            report.setdefault("errors", {})[name] = f"{type(err).__name__}: {err}"
            print(f"gpu_check: the {name} part failed: {err}", file=sys.stderr)
            traceback.print_exc()  # into bench.log: where it failed, not only what
        report.setdefault("part_s", {})[name] = round(time.monotonic() - started, 1)
        if name == "engine_limit" and name in report:
            pace = float(report[name]["gpu"]["pages_per_s"])
        save(report, args.out, budget.started, logs)
    print(markdown(report))
    return 1 if report.get("errors") else 0


def skip_reason(
    name: str, args: argparse.Namespace, report: dict[str, Any], skip: set[str], left_s: float
) -> str | None:
    """Why a part does not run, or None."""
    if name in skip:
        return "--skip"
    if name == "mixed" and args.device == "cpu":
        return "the device is the CPU already"
    if name in ("launch", "syncs", "overlap", "warmup") and args.backend != "torch":
        return f"torch only ({args.backend})"
    if name in ("cpu_side", "texts") and "engine_limit" not in report:
        return "needs the engine limit's maps and texts"
    if left_s < PART_MIN_S[name]:
        return f"time: {left_s:.0f} s of the budget left, needs {PART_MIN_S[name]:.0f} s"
    return None


def save(
    report: dict[str, Any], out: Path, started: float, logs: dict[str, str] | None = None
) -> None:
    """Write `OUT_FILES` with the parts so far, nothing else and nothing deeper."""
    report["summary"] = summary(report)
    report["wall_s"] = round(time.monotonic() - started, 1)
    (out / OUT_FILES[0]).write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / OUT_FILES[1]).write_text(markdown(report))
    if logs is not None:
        text = "".join(
            f"== {name} (last {LOG_TAIL_BYTES >> 10} KiB)\n{tail}\n" for name, tail in logs.items()
        )
        (out / OUT_FILES[2]).write_text(text.encode()[-LOGS_MAX_BYTES:].decode("utf-8", "replace"))


def merge_tests(out: Path, junit: Path) -> int:
    """Add tests/gpu's outcomes (`junit_outcomes`) to the report saved in `out`."""
    path = out / OUT_FILES[0]
    report: dict[str, Any] = {"device": "?", "backend": "?", "precision": "?"}
    report.update({"torch": {"shapes": "?"}, "cpu_workers": "?"})
    if path.is_file():  # the benchmark ran first
        report = json.loads(path.read_text("utf-8"))
    report["tests"] = junit_outcomes(junit)
    report["summary"] = summary(report)
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / OUT_FILES[1]).write_text(markdown(report))
    print("\n".join(tests_markdown(report)))
    return 0 if not report["tests"]["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
