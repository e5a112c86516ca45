"""What a page's detection map costs the device worker's thread, and the CPU worker's DB step, as a
float map and as the byte map a torch engine quantises on its device (issue 40, item 2).

`python -m loadtest.bench.det_map_cost` runs the real detector (`[engine] cpu_backend`, torch by
default here) on real 150 dpi pages for their maps, then times, per page:

- the device worker's side of a det batch once the copy back is done
  (`serving.workers.device_worker.item_outcomes`): the float32 map to float16 and into shared
  memory (`pipelines.stages.DET`), or the byte map into shared memory as it is;
- the CPU worker's DB post-processing (`pipelines.det_postprocess.postprocess_det`) of the
  float16 map and of the byte map;

and reports the bytes copied back from the device and put in shared memory. The byte map is the
one the engine answers (`pipelines.det_byte_map.quantize_map`: on a GPU computed there, bit for
bit as on the host, `tests/integration/test_torch_byte_map.py`). Medians of wall time over
`--repeats` runs; the models' own time is not counted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from loadtest.engine_limit import real_page_set
from models.bundle import load_bundle
from pipelines.det_byte_map import quantize_map
from pipelines.det_postprocess import postprocess_det
from pipelines.page import prepare
from pipelines.stages import DET
from pipelines.types import DetParams
from serving.config import AppConfig, EngineConfig
from serving.engine.choice import engine_choice
from serving.workers import shm
from serving.workers.device_worker import ItemOk, item_outcomes


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return round(statistics.median(runs) * 1000, 2)


def _worker_side(stage: Any, raw: np.ndarray, prefix: str) -> int:
    """`item_outcomes` for one page's map, its segment freed after; returns its bytes."""
    (outcome,) = item_outcomes(stage, raw, [1], prefix)
    if not isinstance(outcome, ItemOk):  # pragma: no cover - no failure path in item_outcomes
        raise RuntimeError("the map did not reach shared memory")
    shm.discard(outcome.value)
    return int(outcome.value.nbytes)


def _page_row(
    label: str, image: np.ndarray, raw: np.ndarray, prefix: str, repeats: int
) -> dict[str, Any]:
    """One page's bytes and medians, from its float32 (1, 1, H, W) map."""
    params = DetParams()
    byte_stage = DET.reading_byte_map()
    byte = quantize_map(raw, params.thresh)
    half = DET.output(raw)[0]
    size = (image.shape[0], image.shape[1])

    def db_float() -> np.ndarray:
        return postprocess_det(half, size, params)

    def db_byte() -> np.ndarray:
        return postprocess_det(byte[0, 0], size, params)

    return {
        "page": label,
        "map_px": int(raw[0, 0].size),
        "copied_back_bytes": {"float32": raw.nbytes, "uint8": byte.nbytes},
        "shm_bytes": {
            "float16": _worker_side(DET, raw, prefix),
            "uint8": _worker_side(byte_stage, byte, prefix),
        },
        "worker_ms": {
            "float16": _median_ms(lambda: _worker_side(DET, raw, prefix), repeats),
            "uint8": _median_ms(lambda: _worker_side(byte_stage, byte, prefix), repeats),
        },
        "db_postprocess_ms": {
            "float16": _median_ms(db_float, repeats),
            "uint8": _median_ms(db_byte, repeats),
        },
        "same_boxes": bool(np.array_equal(db_float(), db_byte())),
    }


def measure(backend: str, pages: int, repeats: int) -> list[dict[str, Any]]:
    """One row per page: bytes and median milliseconds, float map and byte map."""
    config = AppConfig(engine=dataclasses.replace(EngineConfig(), cpu_backend=backend))
    spec = load_bundle(config.models.det, config.models.rec).det
    det = engine_choice(config, "cpu").predictor(spec)
    det.load()
    claim = shm.claim_prefix()
    prefix = claim.prefix + "detmap_"
    rows = []
    try:
        for label, image, _ in real_page_set(pages):
            step = prepare(image, DetParams())
            raw = np.ascontiguousarray(det.run(step.inputs[0]), dtype=np.float32)
            rows.append(_page_row(label, image, raw, prefix, repeats))
    finally:
        shm.sweep(prefix)
        claim.release()
        det.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print one JSON line per page and a median line."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench.det_map_cost")
    parser.add_argument("--backend", default="torch", help="the detector's CPU engine")
    parser.add_argument("--pages", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    rows = measure(args.backend, args.pages, args.repeats)
    for row in rows:
        print(json.dumps(row))
    summary = {
        key: {
            kind: round(statistics.median(row[key][kind] for row in rows), 2)
            for kind in rows[0][key]
        }
        for key in ("worker_ms", "db_postprocess_ms")
    }
    print(json.dumps({"median": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
