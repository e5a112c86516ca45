"""Soak verdicts from samples: warm-up split, memory and fd growth, and the pass/fail criteria.

Definitions (the README states the same):

- Judged samples: those from ``warmup_s`` after traffic started until it stopped sending; the
  warm-up and the drain of the last requests are plotted, not judged.
- Windows: of the ``n`` samples after warm-up, the first and the last ``ceil(0.1 n)`` (at least
  one each).
- Memory of a process at a sample: its RSS averaged over the reads since the previous sample
  (every 0.5 s; see `loadtest.soak.probe`).
- Memory growth of the server: the summed memory of all its processes, mean over the last window
  against mean over the first window, ``end / start - 1``. It must stay under 5 %.
- Memory growth of a process, judged as a share of the server: ``(end - start) / server start``
  with the same windows. It must stay under 5 % too: no process may add more than 5 % of the
  server's memory. Not ``end / start - 1`` of the process itself: a CPU worker of 75 MiB parks its
  glibc heap at 135 MiB for minutes after a large page and drops back later (bounded, seen on
  every soak), which is +80 % of itself but 4 % of the server. The report shows both.
- Fd growth of a process: most open fds in the last window minus most in the first window. It
  must not exceed the tolerance (4: sockets and segments of requests in flight come and go).
- Segments: none with the server's prefix once traffic has ended (the server idle), and none
  after it stopped. The server sweeps its prefix on stop, so only the idle count shows a leak.
- Processes: every process seen in the first window is there in every later sample (none died
  or was restarted), and the server stops on SIGTERM by itself (exit status 0, or -15 as
  uvicorn re-raises the signal after its graceful shutdown), not by the SIGKILL after 60 s.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loadtest.soak.probe import Sample

__all__ = [
    "Criterion",
    "Growth",
    "Limits",
    "ProcessRow",
    "after_warmup",
    "judge",
    "process_rows",
    "total_growth",
    "window_size",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What a soak must stay within."""

    max_growth: float = 0.05
    """Memory growth after warm-up, as a fraction (0.05 = 5 %)."""
    fd_tolerance: int = 4
    """Open fds a process may gain between the first and the last window."""
    window_fraction: float = 0.1
    """Share of the post-warm-up samples in each of the two windows compared."""


@dataclass(frozen=True, slots=True)
class Growth:
    """Mean of a quantity over the first and over the last window after warm-up."""

    start: float
    end: float

    @property
    def fraction(self) -> float:
        """``end / start - 1``; 0 when ``start`` is 0."""
        return self.end / self.start - 1 if self.start > 0 else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessRow:
    """One server process over the judged part of the soak."""

    pid: int
    role: str
    rss: Growth
    """Of the per-sample mean RSS."""
    uss: Growth | None
    fds_start: int
    """Most open fds in the first window."""
    fds_end: int
    """Most open fds in the last window."""
    samples: int
    """Post-warm-up samples the process was in."""
    throughout: bool
    """In the first window and in every sample after it."""

    def share_of(self, server: Growth) -> float:
        """This process's growth as a share of the server's memory at the start window."""
        return (self.rss.end - self.rss.start) / server.start if server.start > 0 else 0.0

    @property
    def fd_growth(self) -> int:
        """``fds_end - fds_start``."""
        return self.fds_end - self.fds_start


@dataclass(frozen=True, slots=True)
class Criterion:
    """One pass/fail check with the figures behind it."""

    name: str
    passed: bool
    detail: str


def window_size(n: int, fraction: float) -> int:
    """Samples in each comparison window: ``ceil(fraction * n)``, at least 1, at most ``n``."""
    return min(n, max(1, math.ceil(fraction * n)))


def after_warmup(samples: Sequence[Sample], warmup_s: float, end_s: float) -> list[Sample]:
    """The samples judged: from ``warmup_s`` after traffic started until it stopped (``end_s``).

    Samples while the last requests drain, after ``end_s``, see less load and are not judged.
    """
    return [s for s in samples if warmup_s <= s.t_s <= end_s]


def growth(values: Sequence[float], fraction: float) -> Growth:
    """Mean of the first and of the last window of ``values``."""
    if not values:
        return Growth(0.0, 0.0)
    k = window_size(len(values), fraction)
    return Growth(sum(values[:k]) / k, sum(values[-k:]) / k)


def total_growth(samples: Sequence[Sample], fraction: float) -> Growth:
    """Growth of the summed RSS of all the server's processes."""
    return growth([s.rss_mean_bytes for s in samples], fraction)


def process_rows(samples: Sequence[Sample], fraction: float) -> list[ProcessRow]:
    """One row per process seen after warm-up, main process first, then by role."""
    k = window_size(len(samples), fraction)
    first_window = {p.pid for s in samples[:k] for p in s.processes}
    rows = []
    for pid in sorted({p.pid for s in samples for p in s.processes}):
        seen = [(i, p) for i, s in enumerate(samples) for p in s.processes if p.pid == pid]
        procs = [p for _, p in seen]
        uss = [p.uss_bytes for p in procs]
        m = window_size(len(procs), fraction)
        throughout = pid in first_window and len(seen) == len(samples) - seen[0][0]
        rows.append(
            ProcessRow(
                pid=pid,
                role=procs[-1].role,
                rss=growth([p.rss_mean_bytes for p in procs], fraction),
                uss=None if None in uss else growth([float(u or 0) for u in uss], fraction),
                fds_start=max(p.fds for p in procs[:m]),
                fds_end=max(p.fds for p in procs[-m:]),
                samples=len(procs),
                throughout=throughout,
            )
        )
    return sorted(rows, key=lambda r: (r.role != "main", r.role, r.pid))


def _pct(fraction: float) -> str:
    return f"{fraction * 100:+.1f} %"


def judge(
    rows: Sequence[ProcessRow],
    total: Growth,
    limits: Limits,
    *,
    judged_samples: int,
    requests: int,
    errors: Mapping[str, int],
    idle_segments: int,
    stop_segments: int,
    exit_code: int | None,
) -> list[Criterion]:
    """The pass/fail criteria of a soak, in the order the report lists them."""
    failed = sum(errors.values())
    causes = ", ".join(f"{k}: {v}" for k, v in sorted(errors.items())) or "none"
    grown = [r for r in rows if r.share_of(total) >= limits.max_growth]
    worst = max(rows, key=lambda r: r.share_of(total), default=None)
    leaky_fds = [r for r in rows if r.fd_growth > limits.fd_tolerance]
    gone = [r for r in rows if not r.throughout]
    enough = judged_samples >= 2
    return [
        Criterion(
            "requests",
            requests > 0 and failed == 0,
            f"{requests} requests, {failed} failed ({causes})",
        ),
        Criterion(
            "samples",
            enough,
            f"{judged_samples} samples judged (at least 2 to compare windows)",
        ),
        Criterion(
            "memory growth",
            enough and total.fraction < limits.max_growth,
            f"all processes {_pct(total.fraction)} (limit {_pct(limits.max_growth)})",
        ),
        Criterion(
            "memory growth per process",
            enough and bool(rows) and not grown,
            "largest "
            + (
                f"{worst.role} {(worst.rss.end - worst.rss.start) / 2**20:+.0f} MiB = "
                f"{_pct(worst.share_of(total))} of the server ({_pct(worst.rss.fraction)} of "
                f"itself)"
                if worst
                else "-"
            )
            + f"; limit {_pct(limits.max_growth)} of the server",
        ),
        Criterion(
            "fd growth",
            enough and not leaky_fds,
            f"largest {max((r.fd_growth for r in rows), default=0):+d} "
            f"(tolerance {limits.fd_tolerance})"
            + "".join(f"; {r.role} {r.fds_start} -> {r.fds_end}" for r in leaky_fds),
        ),
        Criterion(
            "segments idle",
            idle_segments == 0,
            f"{idle_segments} segments with the server's prefix once traffic ended",
        ),
        Criterion(
            "segments after stop",
            stop_segments == 0,
            f"{stop_segments} segments with the server's prefix after it stopped",
        ),
        Criterion(
            "processes",
            bool(rows) and not gone and exit_code in (0, -signal.SIGTERM),
            ("all present throughout" if not gone else "gone or new: ")
            + ", ".join(f"{r.role} (pid {r.pid})" for r in gone)
            + f"; exit status on SIGTERM {exit_code}",
        ),
    ]
