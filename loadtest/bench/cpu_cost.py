"""What a page costs the host outside the models: CPU seconds in a CPU worker and in a device
worker, and bytes through shared memory (issue 31: the CPU-side limit).

`ocr-bench host-cost` runs the server's own stage functions in this process, one
page after another, as the server's processes run them: the CPU worker's steps
(`serving.workers.cpu_stages`: decode and prepare, DB post-process and crops, CTC decode) and the
device worker's side of a batch (`DeviceRunner.run_batch`: collate from shared memory, normalise,
the outputs back), with the real models (`[engine] cpu_backend`) whose own CPU time is left out.
Figures are CPU time of the calling thread (`time.thread_time`), not wall time, so a busy machine
moves them less, and an engine's own threads (which may spin after a call) do not count; OpenCV
runs on one thread, as in a CPU worker, and the model calls' time is subtracted.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any, cast

import cv2
import numpy as np

from loadtest.bench.results import Results, bars
from loadtest.bench.scenario import Scenario, register
from loadtest.engine_limit import real_page_set
from models.bundle import load_bundle
from serving.config import AppConfig
from serving.decode.readers import DecodeLimits
from serving.engine.choice import engine_choice
from serving.request_options import ocr_options
from serving.workers import cpu_stages, device_worker, shm
from serving.workers.device_worker import ItemOk, WorkerSetup

# The device worker's in-process side, by its name now or before (the same fields and calls).
_DeviceChild: Any = (
    vars(device_worker).get("DeviceWorkerChild") or vars(device_worker)["DeviceRunner"]
)


class _Timed:
    """A predictor whose `run` CPU time is counted apart (and subtracted from the host's)."""

    def __init__(self, predictor: Any) -> None:
        self._predictor = predictor
        self.model_s = 0.0

    def run(self, batch: np.ndarray) -> np.ndarray:
        started = time.thread_time()
        try:
            return cast(np.ndarray, self._predictor.run(batch))
        finally:
            self.model_s += time.thread_time() - started

    def __getattr__(self, name: str) -> Any:
        return getattr(self._predictor, name)


def _device_side(
    runner: Any, timed: _Timed, stage: str, refs: Sequence[shm.ShmRef]
) -> tuple[list[Any], float]:
    model_before = timed.model_s
    started = time.thread_time()
    outcomes = runner.run_batch(stage, list(refs))
    spent = time.thread_time() - started - (timed.model_s - model_before)
    values = []
    for outcome in outcomes:
        if not isinstance(outcome, ItemOk):
            raise RuntimeError(f"{stage} batch failed: {outcome}")
        values.append(outcome.value)
    return values, spent


def measure(pages: Sequence[np.ndarray], config: AppConfig) -> dict[str, Any]:
    """Per page: CPU seconds of each step, and bytes written to shared memory by kind."""
    models = config.models
    bundle = load_bundle(models.det, models.rec)
    options = ocr_options(bundle, config.pipeline)
    engine = engine_choice(config, "cpu")
    timed = {}
    for stage in ("det", "rec"):
        predictor = engine.predictor(bundle.specs[stage])
        predictor.load()
        timed[stage] = _Timed(predictor)
    claim = shm.claim_prefix()
    prefix = claim.prefix + "cost_"
    cpu_stages.set_worker_state(tuple(bundle.charset), prefix)
    setup = WorkerSetup(model_dirs={}, shm_prefix=prefix)
    runner = _DeviceChild(spec=None, setup=setup, conn=None)
    runner.use(dict(timed))
    cv2.setNumThreads(1)  # as `cpu_stages.init_cpu_worker`
    limits = DecodeLimits(
        max_pdf_pages=config.input.max_pdf_pages,
        pdf_render_scale=config.input.pdf_render_scale,
        max_image_pixels=config.input.max_image_pixels,
    )
    rows: list[dict[str, float]] = []
    try:
        for image in pages:
            ok, png = cv2.imencode(".png", image)
            if not ok:
                raise RuntimeError("PNG encoding failed")
            row: dict[str, float] = {}
            started = time.thread_time()
            prepared = cpu_stages.prepare_page_of(png.tobytes(), "image", 0, limits, options.det)
            row["cpu_prepare_s"] = time.thread_time() - started
            step = prepared.step
            row["bytes_page"] = prepared.image.nbytes
            row["bytes_det_input"] = sum(ref.nbytes for ref in step.inputs)
            maps, row["device_det_s"] = _device_side(runner, timed["det"], "det", step.inputs)
            row["bytes_det_map"] = sum(ref.nbytes for ref in maps)
            started = time.thread_time()
            nxt = cpu_stages.after_det(step, maps, prepared.image, options.det, options.rec, None)
            row["cpu_after_det_s"] = time.thread_time() - started
            row["bytes_rec_inputs"] = sum(ref.nbytes for ref in nxt.inputs)
            outputs = []
            row["device_rec_s"] = 0.0
            for ref in nxt.inputs:
                values, spent = _device_side(runner, timed["rec"], "rec", [ref])
                outputs.extend(values)
                row["device_rec_s"] += spent
            started = time.thread_time()
            cpu_stages.finish(nxt, outputs, prepared.image, options.rec, None)
            row["cpu_finish_s"] = time.thread_time() - started
            row["lines"] = sum(len(b) for b in nxt.state.batches)
            row["mpx"] = image.shape[0] * image.shape[1] / 1e6
            for ref in [*prepared.refs(), *maps, *nxt.refs()]:
                shm.discard(ref)
            rows.append(row)
    finally:
        shm.sweep(prefix)
        claim.release()
    return _summary(rows)


def _summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    keys = rows[0].keys()
    mean = {key: statistics.fmean(row[key] for row in rows) for key in keys}
    cpu = mean["cpu_prepare_s"] + mean["cpu_after_det_s"] + mean["cpu_finish_s"]
    device = mean["device_det_s"] + mean["device_rec_s"]
    moved = sum(value for key, value in mean.items() if key.startswith("bytes_"))
    return {
        "pages": len(rows),
        "per_page_mean": {
            k: round(v, 4) if k.endswith("_s") else round(v) for k, v in mean.items()
        },
        "cpu_worker_core_s": round(cpu, 4),
        "device_worker_host_core_s": round(device, 4),
        "shm_bytes": round(moved),
        "per_line": {
            "after_det_s": round(mean["cpu_after_det_s"] / max(mean["lines"], 1), 6),
            "finish_s": round(mean["cpu_finish_s"] / max(mean["lines"], 1), 6),
        },
    }


@register
class HostCost(Scenario):
    """A page's CPU seconds outside the models, in a CPU worker and a device worker."""

    name = "host-cost"
    help = "a page's CPU seconds outside the models (CPU and device workers), shared-memory bytes"
    shared = ("out", "pages", "dpi")

    def run(self, args: argparse.Namespace) -> Results:
        """The server's stage functions on the bench's pages, one after another."""
        pages = [image for _, image, _ in real_page_set(args.pages, args.dpi)]
        report = measure(pages, AppConfig())
        mean = report["per_page_mean"]
        lines = [
            f"- {report['pages']} pages; a page's core-seconds outside the models: CPU worker "
            f"{report['cpu_worker_core_s']:.4f}, device worker "
            f"{report['device_worker_host_core_s']:.4f}; shared memory "
            f"{report['shm_bytes'] / 2**20:.2f} MiB",
            "- per page, mean: " + ", ".join(f"{k} {v}" for k, v in mean.items()),
        ]
        seconds = {k: float(v) for k, v in mean.items() if k.endswith("_s")}
        return Results(
            data=report,
            markdown="\n".join(lines) + "\n",
            plots={"core_s": bars("A page's CPU seconds outside the models", "s", seconds)},
        )
