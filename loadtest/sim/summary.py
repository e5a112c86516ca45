"""The figures of one simulation run, as plain data (the JSON summary and the Markdown rows)."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from loadtest.sim.run import SimResult
from loadtest.sim.stats import OUTCOMES, KindStats


def _percentiles(values: array[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_s": None, "p95_s": None, "p99_s": None, "max_s": None}
    data = np.frombuffer(values, dtype=np.float64)
    p50, p95, p99 = np.percentile(data, [50, 95, 99])
    return {
        "p50_s": round(float(p50), 3),
        "p95_s": round(float(p95), 3),
        "p99_s": round(float(p99), 3),
        "max_s": round(float(data.max()), 3),
    }


def _kind(stats: KindStats, window_s: float) -> dict[str, Any]:
    requests = sum(stats.outcomes.values())
    return {
        "requests": requests,
        **{outcome: stats.outcomes.get(outcome, 0) for outcome in OUTCOMES},
        "pages_ok": stats.pages_ok,
        "pages_per_s": round(stats.pages_done / window_s, 3),
        **_percentiles(stats.latencies_s),
    }


def _devices(result: SimResult) -> dict[str, Any]:
    recorder = result.recorder
    window = recorder.window_s
    devices: dict[str, Any] = {}
    units = {model.name: model.unit for model in result.config.devices}
    for name, (kind, compute_s) in result.devices.items():
        stages: dict[str, Any] = {}
        for (device, stage), b in sorted(recorder.batches.items()):
            if device != name or not b.batches:
                continue
            rows = sum(size * n for size, n in b.rows.items())
            stages[stage] = {
                "batches": b.batches,
                "items": b.items,
                "mean_rows": round(rows / b.batches, 2),
                "max_rows": max(b.rows),
                "rows_histogram": {str(k): v for k, v in sorted(b.rows.items())},
                "busy_share": round(b.compute_s / window, 4),
                "mean_batch_ms": round(1000 * b.compute_s / b.batches, 2),
            }
        devices[name] = {
            "kind": kind,
            "device": units[name],
            "utilisation": round(compute_s / window, 4),
            "thread_utilisation": round(recorder.thread_busy_s.get(name, 0.0) / window, 4),
            "stages": stages,
        }
    return devices


def _units(result: SimResult) -> dict[str, float]:
    """Each device's busy share, its workers' compute added (`workers.gpu_instances`)."""
    busy: dict[str, float] = {}
    for model in result.config.devices:
        busy[model.unit] = busy.get(model.unit, 0.0) + result.devices[model.name][1]
    return {unit: round(seconds / result.recorder.window_s, 4) for unit, seconds in busy.items()}


def summarize(result: SimResult) -> dict[str, Any]:
    """Every figure of the run, JSON-ready."""
    config = result.config
    recorder = result.recorder
    window = recorder.window_s
    kinds = {name: _kind(stats, window) for name, stats in recorder.kinds.items()}
    counts = result.counts
    select_us = 1e6 * result.select_s / counts.selects if counts.selects else None
    return {
        "name": config.name,
        "description": config.description,
        "duration_s": config.duration_s,
        "window_s": [recorder.start_s, recorder.end_s],
        "seed": config.seed,
        "placement": config.placement,
        "devices_config": [
            {
                "name": d.name,
                "device": d.unit,
                "kind": d.kind,
                "stages": list(d.stages),
                "inflight_batches": d.inflight_batches,
                "queued_batches": d.queued_batches,
                "limits": {s: [d.limits[s].max_batch_size, d.limits[s].max_cost] for s in d.stages},
            }
            for d in config.devices
        ],
        "cpu_workers": config.cpu.workers,
        "host_cores": config.host.cores,
        "max_inflight_pages": config.admission_pages,
        "queues_max_wait_ms": {s: q.max_wait_ms for s, q in config.queues.items()},
        "throughput_pages_s": round(sum(k["pages_per_s"] for k in kinds.values()), 3),
        "interactive": kinds["interactive"],
        "background": kinds["background"],
        "job_pages_done": result.job_pages_done,
        "job_pages_failed": result.job_pages_failed,
        "devices": _devices(result),
        "device_utilisation": _units(result),
        "queue_wait_ms": {
            stage: {
                "mean": round(1000 * w.total_s / w.count, 1),
                "max": round(1000 * w.max_s, 1),
                "items": w.count,
            }
            for stage, w in sorted(recorder.waits.items())
        },
        "cpu_workers_utilisation": round(recorder.cpu_busy_s / (window * config.cpu.workers), 4),
        "cpu_calls": result.cpu_calls,
        "cpu_calls_skipped": result.cpu_skipped,
        "items_dropped": recorder.dropped_items,
        "admission_page_s": (
            None if result.admission_page_s is None else round(result.admission_page_s, 4)
        ),
        "scheduler": {
            "select_calls": counts.selects,
            "select_calls_skipped": counts.selects_skipped,
            "spin_rechecks": counts.spin_rechecks,
            "select_us_mean": None if select_us is None else round(select_us, 2),
            # Wall seconds in `select` per simulated second of traffic: at least that share of a
            # core would go to the policy in the server's event loop (which also spins, and calls
            # `select` for every idle worker where the simulator skips known answers).
            "select_core_share": round(result.select_s / config.duration_s, 4),
        },
        "cost_model": result.cost_model,
        "simulation": {
            "events": result.events,
            "wall_s": round(result.wall_s, 2),
            "select_wall_s": round(result.select_s, 2),
            "simulated_s": round(result.simulated_s, 1),
        },
    }
