"""`[server]`: the HTTP server and the request lifecycle."""

from __future__ import annotations

import re
from dataclasses import dataclass

from serving.config.checks import check

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
        check(self.port > 0 and self.port < 65536, "server.port", "must be 1..65535")
        check(self.log_format in ("text", "json"), "server.log_format", "must be text or json")
        check(self.max_body_bytes > 0, "server.max_body_bytes", "must be > 0")
        check(self.request_timeout_s > 0, "server.request_timeout_s", "must be > 0")
        check(self.upload_idle_timeout_s > 0, "server.upload_idle_timeout_s", "must be > 0")
        check(self.upload_timeout_s > 0, "server.upload_timeout_s", "must be > 0")
        check(self.upload_min_bytes_per_s >= 0, "server.upload_min_bytes_per_s", "must be >= 0")
        check(self.max_inflight_pages > 0, "server.max_inflight_pages", "must be > 0")
        check(self.inflight_pages_per_gpu >= 0, "server.inflight_pages_per_gpu", "must be >= 0")
        check(self.limit_concurrency >= 0, "server.limit_concurrency", "must be >= 0 (0 = none)")
        check(self.header_timeout_s > 0, "server.header_timeout_s", "must be > 0")
        check(self.keep_alive_timeout_s > 0, "server.keep_alive_timeout_s", "must be > 0")
        check(self.send_idle_timeout_s > 0, "server.send_idle_timeout_s", "must be > 0")
        check(self.send_min_bytes_per_s >= 0, "server.send_min_bytes_per_s", "must be >= 0")
        check(self.max_connections >= 0, "server.max_connections", "must be >= 0 (0 = none)")
        check(
            self.max_connections_per_client >= 0,
            "server.max_connections_per_client",
            "must be >= 0 (0 = none)",
        )
        check(
            self.health_port == 0
            or (0 < self.health_port < 65536 and self.health_port != self.port),
            "server.health_port",
            "must be 0 (off) or a port in 1..65535 other than server.port",
        )
        check(
            self.max_health_connections >= 0,
            "server.max_health_connections",
            "must be >= 0 (0 = none)",
        )
        check(self.memory_budget_bytes >= 0, "server.memory_budget_bytes", "must be >= 0")
        check(self.overload_status in (429, 503), "server.overload_status", "must be 429 or 503")
        check(self.shutdown_grace_s >= 0, "server.shutdown_grace_s", "must be >= 0")
        check(self.watchdog_s >= 0, "server.watchdog_s", "must be >= 0 (0 = off)")
        for origin in self.cors_origins:
            ok = origin == "*" or (
                origin.startswith(("http://", "https://")) and "/" not in origin[8:]
            )
            check(ok, "server.cors_origins", f"not an origin (scheme://host[:port]): {origin!r}")
        for host in self.allowed_hosts:
            check(
                _HOST_PATTERN.fullmatch(host) is not None,
                "server.allowed_hosts",
                f"not a host name, *.domain or * (no scheme, port or path): {host!r}",
            )
