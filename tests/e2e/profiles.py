"""Named e2e servers (profiles), shared by the whole session.

A profile is one `ocr-serve` configuration that many test files share: a test names it
(`pytestmark = pytest.mark.profile("fake")` for a file, or the mark on one test) and takes the
`server` fixture; the server is started when the first test that names it runs and stopped
after the last one, so each profile starts at most once per session. pytest runs the tests of
one profile together (`server` is a session-scoped fixture parametrized by the profile's name,
as Mosec's tests are by service), so few servers are up at once.

Tests that change what every later test would see (kill or freeze a process, fill a budget, a
pool or the connections, watch a start) start a server of their own with `fresh_server`
(tests/e2e/conftest.py). `tests/unit/test_e2e_layout.py` fails when an e2e file starts a server
any other way. docs/tests.md says how to add a test or a profile.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from serving.http.keys import hash_key

DEFAULT = "default"
"""The profile of a test that takes `server` and names none."""


@dataclass(frozen=True)
class Profile:
    """How one shared server is started."""

    config: str
    """Its config.toml. `{dir}` stands for the server's own folder, `{store}` for an empty job
    store on the session's PostgreSQL (tests/postgres.py), started only for profiles that say
    `{store}`, here or in `env`."""
    doc: str
    """What the profile is for: which tests share it and why its settings are what they are."""
    backend: str | None = None
    """`ocr-serve` on another engine backend (`tests.fakes.predictors:SLOW_FAKE`: no models)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Over the test run's environment."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Written into `{dir}` before the start (API key files)."""
    launch: str = ""
    """Python statements the server process runs before `serving.cli.main` (a test hook)."""
    image: bool = False
    """Started as the container image starts it: `ocr-serve` with no flags, from `{dir}`, its
    config from `OCR_CONFIG` (`config` written to `{dir}/etc-ocr/config.toml`) and `env`."""

    def launch_key(self) -> tuple[object, ...]:
        """What the server started for this profile depends on: profiles with the same key
        share one server (e.g. `precision-auto` is `default` unless the suite forces a
        precision)."""
        env = {**ENV_DEFAULTS, **_ocr_environment(), **self.env}
        return (
            self.config,
            self.backend,
            tuple(sorted(env.items())),
            tuple(sorted(self.files.items())),
            self.launch,
            self.image,
        )


ENV_DEFAULTS = {"OCR_ENGINE__OPENVINO_PRECISION": "auto"}
"""`OCR_*` settings whose absence means this value (for `Profile.launch_key`)."""


def _ocr_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("OCR_")}


SLOW_FAKE = "tests.fakes.predictors:SLOW_FAKE"
"""Model-free device workers, slowed by OCR_FAKE_LATENCY_S (`backend=SLOW_FAKE`)."""

CONFIG = """
[server]
max_body_bytes = 8000000
log_level = "info"
upload_idle_timeout_s = 2.0
upload_timeout_s = 8.0
[input]
max_pdf_pages = 3
[paddlex]
visualize = false
[workers]
devices = ["cpu"]
cpu_workers = 2
# One device worker (the default is two): these tests are about behaviour, and one keeps a 2-core
# machine's start-ups short; test_scheduling runs two.
cpu_instances = 1
[workers.rec_queue]
# One CPU device is always busy, so rec chunks of different requests meet only if they wait
# about one detection run; the worker runs detection meanwhile. 300 ms is a few detections of the
# test pages; 1000 ms cost every page of a multi-page request ~0.2 s more waiting (test_scheduling
# holds that rec batches still mix requests).
max_wait_ms = 300.0
"""
"""The shared e2e config (the `default` profile's): the shipped models (both sets and the page
classifier), two CPU workers, one device worker."""

ONE_WORKER = """
[paddlex]
visualize = false
[workers]
devices = ["cpu"]
cpu_workers = 1
cpu_instances = 1
"""
"""One CPU worker and one device worker, on the CPU, and no visualize images: the small servers'
config (model-free fakes, one-request checks). Put a `[server]` table before it, others after."""

ONE_SET = """
[models]
sets = {}
ori = ""
"""
"""The default det and rec alone (PP-OCRv6 small): no other model set, no page classifier. A
server starts faster and holds less with them; for tests whose pages need neither."""

TENANTS = {
    "alice": "alice-7f3c9a1e5b2d4c6f8a0b",
    "bob": "bob-1d2e3f4a5b6c7d8e9f0a",
    "root": "root-0a9b8c7d6e5f4a3b2c1d",
    "slow": "slow-5e6f7a8b9c0d1e2f3a4b",
    "narrow": "narrow-9a8b7c6d5e4f3a2b1c0d",
}
"""The `keys` profile's named keys (test_tenants.py): id -> secret."""
TENANT_QUOTAS = {
    "root": 'role = "admin"\n',
    "slow": "requests_per_s = 0.001\nburst_requests = 1\n",  # then one every 1000 s
    "narrow": "max_inflight_pages = 1\n",
}
PLAIN_KEY = "plain-env-key-3b4c5d6e7f8a"
"""A key of the plain `OCR_API_KEYS` form, beside the named ones."""
FILE_KEYS = ("e2e-key", "plugin-key")
"""Plain keys of the `keys` profile's `auth.api_keys_file` (test_serve.py, test_ocrmypdf_plugin)."""


def _named_keys(secrets: Mapping[str, str], extra: Mapping[str, str]) -> str:
    return "\n".join(
        f'[[keys]]\nid = "{key_id}"\nsha256 = "{hash_key(secret)}"\n{extra.get(key_id, "")}'
        for key_id, secret in secrets.items()
    )


DEFAULT_CONFIG = (
    CONFIG
    + """[models]
# The packaged textline classifier, used only where a request or pipeline.use_textline_orientation
# asks for it (test_textline_orientation.py).
cls = "embedded:ch_ppocr_mobile_v2.0_cls"
"""
)
REPO_ROOT = Path(__file__).resolve().parents[2]
POISONED_CPU_WORKERS = (
    "from serving.service import runtime; from tests.fakes import cpu_calls; "
    "runtime.init_cpu_worker = cpu_calls.init_cpu_worker_poisoned"
)
F32 = {"OCR_ENGINE__OPENVINO_PRECISION": "f32"}
FAKE_MAX_PIXELS = 10_000_000
FAKE_MAX_FRAMES = 5
FAKE_LATENCY_S = 1.0
"""`fake-slow`'s and `one-slot`'s time of every batch."""
RETRY_AFTER_S = 2
"""`one-slot`'s `server.retry_after_s`."""
LIMITS_MAX_BODY = 16_000_000
LIMITS_BUDGET = 200_000_000
"""Pages get most of it, bodies half of that: a 16 MB body fits alone (32 MB held for a raw one:
the body and its copy; 48 MB for `/ocr`'s JSON), a few large ones do not."""
LIMITS_CONCURRENCY = 8
HARDENED_PASSWORD = "hunter2-in-the-url"
QUOTA_KEYS = {
    "tiny": "tiny-2b7d1f0c9e8a6b4d",
    "roomy": "roomy-5c3a9e1f7b0d2e4a",
    "many": "many-8e1d3c5b7a9f0e2d",
    "one": "one-4a6c8e0b2d4f6a8c",
}
DOCUMENT_KEYS = {
    "alice": "alice-3e1f5a7c9b2d4f6a8c0e",
    "bob": "bob-8d7c6b5a4f3e2d1c0b9a",
    "root": TENANTS["root"],
}
"""test_job_documents.py's two users (`doc-alice` and `doc-bob` on the `keys` server, apart from
test_tenants.py's, whose job lists it checks whole) and its admin."""
STACKED_HEIGHT_PX = 20_000
STAGING_BUDGET = 512 << 20


def jobs_config(data_dir: str, *, inflight: int = 2) -> str:
    """The shipped models, the SQLite job store in `data_dir`, small job limits (`jobs-sqlite`;
    test_jobs.py's own servers with `inflight` 1)."""
    return f"""
[server]
log_level = "info"
[paddlex]
visualize = false
[workers]
devices = ["cpu"]
cpu_workers = 2
cpu_instances = 1
[jobs]
data_dir = "{data_dir}"
max_files_per_job = 4
max_pages_per_job = 6
max_upload_bytes = 1000000
max_inflight_pages = {inflight}
"""


def _free_bytes(path: str) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


PROFILES: dict[str, Profile] = {
    DEFAULT: Profile(
        config=DEFAULT_CONFIG,
        doc="The shipped models (PP-OCRv5 mobile, PP-OCRv6 small, the page classifier) and the "
        "packaged textline classifier (off unless asked for) behind the shared config: reading, "
        "formats, orientation, languages, metrics, timeouts.",
    ),
    "precision-auto": Profile(
        config=DEFAULT_CONFIG,
        env={"OCR_ENGINE__OPENVINO_PRECISION": "auto"},
        doc="`default` at precision auto whatever the suite forces (issue 41): the same server "
        "as `default` unless OCR_ENGINE__OPENVINO_PRECISION says otherwise.",
    ),
    "f32": Profile(
        config=jobs_config("{dir}/data"),
        env=F32,
        doc="Forced to f32 (`OCR_ENGINE__OPENVINO_PRECISION=f32`), as Docker and Kubernetes "
        "users force it: `jobs-sqlite`'s server.",
    ),
    "keys": Profile(
        config=CONFIG.replace(
            "[input]\n", '[input]\nallow_url = true\nurl_allowed_hosts = ["127.0.0.1"]\n'
        )
        + """
[auth]
api_keys_file = "{dir}/keys"
keys_file = "{dir}/keys.toml"
[jobs]
data_dir = "{dir}/data"
""",
        env={"OCR_API_KEYS": PLAIN_KEY},
        files={
            "keys": "# test keys\n" + "\n".join(FILE_KEYS) + "\n",
            "keys.toml": _named_keys(
                {
                    **TENANTS,
                    "doc-alice": DOCUMENT_KEYS["alice"],
                    "doc-bob": DOCUMENT_KEYS["bob"],
                },
                TENANT_QUOTAS,
            ),
        },
        doc="The shipped models, API keys of all three kinds (a plain key from the environment, "
        "a key file, named keys with roles and quotas), URL inputs allowed from 127.0.0.1: "
        "tenants, a job's documents, refusals, the OCRmyPDF plugin's key.",
    ),
    "fake": Profile(
        config=f"""
[server]
max_body_bytes = 80000000
# 768 MiB for pages, of which bodies may hold 384 MiB: an 80 MB body's 3 copies fit, a 45 MB
# JSON body whose text widens to 4 bytes a character does not (test_json_bombs.py).
memory_budget_bytes = 1073741824
send_idle_timeout_s = 2.0
log_level = "info"
[input]
max_image_pixels = {FAKE_MAX_PIXELS}
max_frames_per_document = {FAKE_MAX_FRAMES}
[paddlex]
visualize = false
# Large enough that a visualized answer (two ~3.6 MB pictures, as base64) is more than the
# kernel's socket buffers take (4 MiB at most here): the rest waits in the server for the client.
visualize_max_pixels = 4000000
visualize_max_bytes = 4194304
[workers]
# workers.devices and engine.gpu_backend left at their defaults ("auto"): which engine would
# serve GPUs, and why, is said as a default server says it (test_gpu_engine.py).
cpu_workers = 1
cpu_instances = 1
[jobs]
data_dir = "{{dir}}/data"
""",
        backend=SLOW_FAKE,
        launch=POISONED_CPU_WORKERS,
        doc="Model-free device workers (no latency) and CPU workers that crash on "
        "`tests.fakes.cpu_calls.POISON_MARK`, as a decoder crash on a crafted file would "
        "(quarantined pages; every other page is read as usual): what the server does around "
        "the models, bodies, decoders, JSON bombs, unread answers, the GPU engine's choice.",
    ),
    "fake-slow": Profile(
        config="""
[server]
log_level = "info"
"""
        + ONE_WORKER,
        backend=SLOW_FAKE,
        env={"OCR_FAKE_LATENCY_S": str(FAKE_LATENCY_S)},
        doc="Model-free device workers whose every batch takes 1 s: a page takes at least 2 s, "
        "so the server's measured pace is known (deadline shedding).",
    ),
    "one-slot": Profile(
        config=f"""
[server]
log_level = "info"
max_inflight_pages = 1
retry_after_s = {RETRY_AFTER_S}
"""
        + ONE_WORKER,
        backend=SLOW_FAKE,
        env={"OCR_FAKE_LATENCY_S": str(FAKE_LATENCY_S)},
        doc="`fake-slow` with one page in flight at most: requests beside it are shed with "
        "Retry-After.",
    ),
    "limits": Profile(
        config=f"""
[server]
max_body_bytes = {LIMITS_MAX_BODY}
memory_budget_bytes = {LIMITS_BUDGET}
limit_concurrency = {LIMITS_CONCURRENCY}
log_level = "info"
"""
        + ONE_WORKER
        + f"""[jobs]
data_dir = "{{dir}}/data"
max_upload_bytes = {LIMITS_MAX_BODY}
""",
        backend=SLOW_FAKE,
        doc="Model-free; small body cap, memory budget and request slots, so that bodies fill "
        "them (test_body_limits.py).",
    ),
    "open-bind": Profile(
        config="""
[server]
host = "0.0.0.0"
log_level = "info"
"""
        + ONE_WORKER
        + """[jobs]
data_dir = "{dir}/data"
""",
        backend=SLOW_FAKE,
        env={"OCR_API_KEYS": ""},
        doc="Model-free, no API keys, bound beyond loopback with `auth.open` left off: the jobs "
        "API refused (403).",
    ),
    "hardened": Profile(
        config="""
[server]
host = "0.0.0.0"
log_level = "info"
[auth]
open = true  # keys off on 0.0.0.0: the jobs API served anyway, so the Host check is what guards it
"""
        + ONE_WORKER
        + f"""[jobs]
data_dir = "{{dir}}/data"
store = "{{store}}&password={HARDENED_PASSWORD}"
""",
        backend=SLOW_FAKE,
        doc="Model-free, keys off on 0.0.0.0 with `auth.open = true`, a PostgreSQL job store "
        "whose URL carries `?password=` (trust auth: libpq sends it unused): security headers, "
        "Host and Origin checks, secrets kept out of the log (test_hardening.py).",
    ),
    "quotas": Profile(
        config=f"""
[server]
max_body_bytes = 8000000
[paddlex]
visualize = false
[auth]
keys_file = "{{dir}}/keys.toml"
[workers]
devices = ["cpu"]
cpu_workers = 1
cpu_instances = 1
[jobs]
data_dir = "{{dir}}/data"
# More than the disk holds: an upload past the free space gets 507, not 413.
max_upload_bytes = {8 * _free_bytes(tempfile.gettempdir())}
max_inflight_pages = 2
""",
        backend=SLOW_FAKE,
        env={"OCR_FAKE_LATENCY_S": "0.2"},
        files={"keys.toml": _named_keys(QUOTA_KEYS, {"tiny": "max_jobs = 1\n"})},
        doc="Model-free, pages slowed to 0.2 s a batch and two job slots (so that jobs of two "
        "keys overlap), named keys of which `tiny` may keep one job: stored quotas and the "
        "slots' shares.",
    ),
    "stacked-lines": Profile(
        config=f"""
[server]
log_level = "info"
[input]
max_page_side_px = {STACKED_HEIGHT_PX}
[pipeline.det]
max_side_limit = {STACKED_HEIGHT_PX}
"""
        + ONE_WORKER,
        backend="tests.fakes.predictors:STACKED_LINES",
        doc="A fake detector that finds a line every 20 rows: pages of ~1,000 lines.",
    ),
    "jobs-sqlite": Profile(
        config=jobs_config("{dir}/data"),
        env=F32,
        doc="The shipped models at f32 (Paddle's texts on any CPU), the SQLite job store, small "
        "job limits: the jobs API, schemathesis' generated requests (bounded by the job "
        "limits); `f32` too.",
    ),
    "staging": Profile(
        config=CONFIG.replace("[input]\n", "[input]\nmax_page_side_px = 1000\n").replace(
            "[server]\n", f"[server]\nmemory_budget_bytes = {STAGING_BUDGET}\n"
        )
        + """
[jobs]
data_dir = "{dir}/data"
staging_timeout_s = 5.0
max_staging_pixels = 10000000000
max_uploads_per_key = 1
""",
        doc="The shipped models, a 512 MiB budget, pages at most 1000 px a side, staging with a "
        "5 s deadline and one upload a client at once (test_job_staging.py).",
    ),
    "bucketed": Profile(
        config=CONFIG
        + """
[engine]
batching = "bucketed"
cpu_threads = 2
[workers.cpu]
# The GPU class's batch limits, so that rows of several pages fit one batch.
det = { max_batch_size = 4, max_cost = 32000000 }
rec = { max_batch_size = 96, max_cost = 153600 }
""",
        doc='The shipped models on OpenVINO with `[engine] batching = "bucketed"`.',
    ),
    "torch-buckets": Profile(
        config=CONFIG
        + """
[engine]
cpu_backend = "torch"
cpu_threads = 2
[engine.torch]
shapes = "buckets"
rec_widths_px = [320, 640, 1280, 3200]
det_step_px = 256
""",
        doc="The torch engine with shape buckets, on the CPU.",
    ),
    "ppocrv6-onnxruntime": Profile(
        config="""
[server]
log_level = "info"
[paddlex]
visualize = false
[models]
det = "embedded:PP-OCRv6_small_det"
rec = "embedded:PP-OCRv6_small_rec"
sets = {}
[engine]
cpu_backend = "onnxruntime"
[workers]
devices = ["cpu"]
cpu_workers = 1
""",
        doc="PP-OCRv6 small (the rapidocr wheel's ONNX models) as the default set, on ONNX "
        "Runtime.",
    ),
    "image": Profile(
        config=(REPO_ROOT / "config.toml").read_text(),
        image=True,
        env={
            # The image binds 0.0.0.0; the tests stay on loopback.
            "OCR_SERVER__HOST": "127.0.0.1",
            "OCR_SERVER__PORT": "{port}",
            "OCR_SERVER__LOG_FORMAT": "json",
            "OCR_WORKERS__DEVICES": '["cpu"]',
            "OCR_WORKERS__CPU_WORKERS": "1",
            "OCR_PADDLEX__VISUALIZE": "false",
            "OCR_JOBS__DATA_DIR": "{dir}/jobs",
            # The image's ONNX conversions are at a fixed path; here, `make convert`'s.
            "OCR_ENGINE__ONNX_DIR": str(REPO_ROOT / "var" / "models" / "onnx"),
            # The image keeps the precision check's verdicts on its volume; here, the ones the
            # suite measured ahead (`precision_checked`): a cold check took a minute of its start.
            "OCR_ENGINE__PRECISION_CHECK_DIR": str(REPO_ROOT / "var" / "precision"),
        },
        doc="Started as the container image starts it (config.toml as shipped: two device "
        "workers; JSON logs), with this machine's port, devices and paths.",
    ),
}


def profile_names(marks: list[tuple[str, ...]], uses_server: bool) -> tuple[str, ...]:
    """The profiles a test names: those of its closest `profile` mark, else `default` where it
    takes `server`."""
    for names in marks:
        return names
    return (DEFAULT,) if uses_server else ()


def check_names(names: tuple[str, ...], where: str) -> None:
    unknown = [name for name in names if name not in PROFILES]
    if unknown:
        raise ValueError(
            f"{where}: unknown profile(s) {unknown}; tests/e2e/profiles.py has {sorted(PROFILES)}"
        )


StoreFactory = Callable[[], str]
ServerDir = Callable[[str], Path]
