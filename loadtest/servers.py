"""Servers under benchmark: started as subprocesses on loopback, watched, and stopped."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from loadtest.onnx_export import OnnxModels
from serving.request_options import OcrOptions


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class MemorySampler:
    """Samples the resident memory of a process and all its descendants, keeping the peak."""

    pid: int
    interval_s: float = 0.5
    peak_bytes: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Sample in a background thread until `stop()`."""
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def sample(self) -> int:
        """Current RSS of the process tree in bytes."""
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        total = 0
        for proc in procs:
            try:
                total += proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return total

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self.sample())
            self._stop.wait(self.interval_s)


@dataclass
class ServerProcess:
    """A server started for a benchmark."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    memory: MemorySampler

    def wait_ready(self, path: str, timeout_s: float = 600.0) -> float:
        """Poll `path` until it answers 200; returns the seconds it took."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see {self.log}")
            try:
                if httpx.get(f"{self.url}{path}", timeout=5).status_code == 200:
                    return time.monotonic() - started
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{self.name} not ready after {timeout_s} s; see {self.log}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 60 s; stops the memory sampler."""
        self.memory.stop()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(name: str, argv: list[str], port: int, log: Path, env: dict[str, str]) -> ServerProcess:
    """Start a server process whose output goes to `log`."""
    with log.open("wb") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}
        )
    memory = MemorySampler(process.pid)
    memory.start()
    return ServerProcess(
        name=name, url=f"http://127.0.0.1:{port}", process=process, log=log, memory=memory
    )


OURS_CPU_TOML = """
[server]
log_level = "warning"
[paddlex]
visualize = false
[workers]
devices = ["cpu"]
"""
"""The start of our server's config in the benchmarks: CPU workers only, quiet; append keys of
`[workers]`, then other sections."""


def start_ours(out: Path, config_text: str) -> ServerProcess:
    """`ocr-serve` with the given config, on a free loopback port."""
    port = free_port()
    config = out / "ours.toml"
    config.write_text(config_text)
    argv = [sys.executable, "-m", "serving", "--config", str(config), "--port", str(port)]
    return start("ours", argv, port, out / "ours.log", {})


PADDLEX_PIPELINE = """pipeline_name: OCR
text_type: general
use_doc_preprocessor: False
use_textline_orientation: False
SubModules:
  TextDetection:
    module_name: text_detection
    model_name: PP-OCRv5_mobile_det
    model_dir: {det}
    limit_side_len: 64
    limit_type: min
    max_side_limit: 4000
    thresh: 0.3
    box_thresh: 0.6
    unclip_ratio: 1.5
    engine_config:
      cpu_threads: {threads}{run_mode}
  TextRecognition:
    module_name: text_recognition
    model_name: PP-OCRv5_mobile_rec
    model_dir: {rec}
    batch_size: 6
    score_thresh: 0.0
    engine_config:
      cpu_threads: {threads}{run_mode}
Serving:
  visualize: False
"""


def start_paddlex(
    out: Path,
    det_dir: Path,
    rec_dir: Path,
    cpu_threads: int,
    *,
    venv: Path | None = None,
    name: str = "paddlex",
    run_mode: str | None = None,
) -> ServerProcess:
    """`paddlex --serve` (PaddleX basic serving) on the same models and detection settings.

    `venv`: a virtual environment with its own PaddleX and Paddle (default: the one running this).
    `run_mode`: PaddleX's engine run mode for both models (default: PaddleX's, "mkldnn" on CPU).
    """
    port = free_port()
    pipeline = out / f"{name}-ocr.yaml"
    extra = f"\n      run_mode: {run_mode}" if run_mode else ""
    pipeline.write_text(
        PADDLEX_PIPELINE.format(det=det_dir, rec=rec_dir, threads=cpu_threads, run_mode=extra)
    )
    bin_dir = venv / "bin" if venv is not None else Path(sys.executable).parent
    argv = [str(bin_dir / "paddlex"), "--serve", "--pipeline", str(pipeline), "--device", "cpu"]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    # On CPU PaddleX runs both models with oneDNN ("mkldnn" run mode) unless told otherwise.
    env = {"PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK": "True"}
    return start(name, argv, port, out / f"{name}.log", env)


# rapidocr_api builds its engine from three model paths only; the bench needs the other settings
# too, so its app is served from a module (RAPIDOCR_APP, written beside the log) that swaps in an
# engine built from RAPIDOCR_PARAMS when it is imported: Uvicorn's worker processes each import
# the app by name, so with `--workers N` every worker gets the engine. Models load lazily, so
# rapidocr_api's own first engine downloads nothing. RapidOCR passes OpenVINO no precision, so
# OpenVINO chooses (bf16 where the CPU has it), which is what its users get; only where
# RAPIDOCR_OPENVINO_PRECISION is set do its CPU settings gain that precision.
RAPIDOCR_APP = """
import json, os
import rapidocr_api.main as api
from rapidocr import EngineType, RapidOCR
try:
    from rapidocr.inference_engine.openvino import device_config
except ImportError:  # OpenVINO not installed: the ONNX Runtime row only
    device_config = None
if device_config is not None and os.environ.get("RAPIDOCR_OPENVINO_PRECISION"):
    get_config = device_config.CPUConfig.get_config
    device_config.CPUConfig.get_config = lambda self: {
        **get_config(self),
        "INFERENCE_PRECISION_HINT": os.environ["RAPIDOCR_OPENVINO_PRECISION"],
    }
params = json.loads(os.environ["RAPIDOCR_PARAMS"])
for key in [k for k in params if k.endswith(".engine_type")]:  # RapidOCR wants its enum
    params[key] = EngineType(params[key])
api.processor.ocr = RapidOCR(params=params)
app = api.app
"""
RAPIDOCR_APP_MODULE = "rapidocr_bench_app"

RAPIDOCR_ENGINES = ("onnxruntime", "openvino")
"""The RapidOCR engines the bench runs (`rapidocr_params`' `engine`)."""

# PaddleOCR's detector normalisation (the models' inference.yml, ours); RapidOCR's default is
# 0.5 and 0.5, which changes the detector's input and so the text.
PADDLE_DET_MEAN = [0.485, 0.456, 0.406]
PADDLE_DET_STD = [0.229, 0.224, 0.225]


def rapidocr_params(
    options: OcrOptions, models: OnnxModels, cpu_threads: int, engine: str = "onnxruntime"
) -> dict[str, object]:
    """RapidOCR settings equal to ours: `options`' detection and recognition settings, the
    detector's normalisation, no orientation classifier, `cpu_threads` threads of `engine`
    ("onnxruntime" or "openvino"), our models and dictionary."""
    if engine not in RAPIDOCR_ENGINES:
        raise ValueError(f"unknown RapidOCR engine {engine!r}: one of {RAPIDOCR_ENGINES}")
    det, rec = options.det, options.rec
    if engine == "openvino":
        threads: dict[str, object] = {
            "EngineConfig.openvino.inference_num_threads": cpu_threads,
            "EngineConfig.openvino.num_streams": 1,
        }
    else:
        threads = {
            "EngineConfig.onnxruntime.intra_op_num_threads": cpu_threads,
            "EngineConfig.onnxruntime.inter_op_num_threads": 1,
        }
    return {
        "Global.use_cls": False,
        "Global.text_score": rec.score_thresh,
        "Global.max_side_len": det.max_side_limit,
        "Det.engine_type": engine,
        "Det.model_path": str(models.det),
        "Det.mean": PADDLE_DET_MEAN,
        "Det.std": PADDLE_DET_STD,
        "Det.limit_side_len": det.limit_side_len,
        "Det.limit_type": det.limit_type,
        "Det.thresh": det.thresh,
        "Det.box_thresh": det.box_thresh,
        "Det.unclip_ratio": det.unclip_ratio,
        "Det.max_candidates": det.max_candidates,
        "Det.use_dilation": False,
        "Det.score_mode": "fast",
        "Rec.engine_type": engine,
        "Rec.model_path": str(models.rec),
        "Rec.rec_keys_path": str(models.keys),
        "Rec.rec_img_shape": [3, rec.image_height, rec.min_width],
        "Rec.rec_batch_num": rec.batch_size,
        **threads,
    }


def start_rapidocr(
    out: Path,
    venv: Path,
    params: dict[str, object],
    name: str = "rapidocr",
    openvino_precision: str | None = None,
    *,
    workers: int = 1,
) -> ServerProcess:
    """RapidOCR's API server (`rapidocr_api`'s app under Uvicorn, `workers` worker processes)
    from `venv` with `params`, on a free loopback port; on OpenVINO at `openvino_precision`
    ("f32" or "bf16"), or, with None, at the precision OpenVINO chooses."""
    port = free_port()
    (out / f"{RAPIDOCR_APP_MODULE}.py").write_text(RAPIDOCR_APP)
    argv = [str(venv / "bin" / "python"), "-m", "uvicorn", f"{RAPIDOCR_APP_MODULE}:app"]
    argv += ["--app-dir", str(out), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--workers", str(workers), "--log-level", "warning"]
    env = {"RAPIDOCR_PARAMS": json.dumps(params)}
    if openvino_precision is not None:
        env["RAPIDOCR_OPENVINO_PRECISION"] = openvino_precision
    return start(name, argv, port, out / f"{name}.log", env)
