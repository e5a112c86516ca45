"""Cost of moving a page's tensors through shared memory (`serving.workers.shm`), per page.

`python -m loadtest.bench.shm_cost` times put + take of the arrays one 150 dpi page sends between
processes: the detector input, its probability map, and the recognition chunks, as they travel
since issue 31 (uint8 pixels, a float16 map) and as they did before (float32).
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from serving.workers import shm

# One A4 page at 150 dpi: det input and map at 1760 x 1248, seven rec chunks of six crops.
PAGE: dict[str, list[tuple[tuple[int, ...], type[np.generic]]]] = {
    "image (uint8)": [((1754, 1241, 3), np.uint8)],
    "det input": [((1, 3, 1760, 1248), np.uint8)],
    "det map": [((1, 1760, 1248), np.float16)],
    "rec chunks": [((6, 3, 48, w), np.uint8) for w in (1600, 1750, 1800, 1850, 1950, 2050, 2100)],
    "before: det input (float32)": [((1, 3, 1760, 1248), np.float32)],
    "before: det map (float32)": [((1, 1760, 1248), np.float32)],
    "before: rec chunks (float32)": [
        ((6, 3, 48, w), np.float32) for w in (1600, 1750, 1800, 1850, 1950, 2050, 2100)
    ],
}


def main() -> int:
    """Print the median milliseconds of put + take per kind of array, and per page (now, and as
    float32 before issue 31)."""
    claim = shm.claim_prefix()  # owned while this runs; a server's start-up sweep takes the rest
    prefix = claim.prefix + "cost_"
    times: dict[str, float] = {}
    try:
        for name, shapes in PAGE.items():
            arrays = [np.random.rand(*shape).astype(dtype) for shape, dtype in shapes]
            runs = []
            for _ in range(7):
                started = time.perf_counter()
                for array in arrays:
                    shm.take(shm.put(array, prefix))
                runs.append(time.perf_counter() - started)
            times[name] = statistics.median(runs) * 1000
            mib = sum(a.nbytes for a in arrays) / 2**20
            print(f"{name:28s} {mib:6.1f} MiB  {times[name]:6.1f} ms")
        now = sum(ms for name, ms in times.items() if not name.startswith("before: "))
        before = times["image (uint8)"] + sum(
            ms for name, ms in times.items() if name.startswith("before: ")
        )
        print(f"{'per page':28s}         {now:6.1f} ms")
        print(f"{'per page, float32 (before)':28s}         {before:6.1f} ms")
    finally:
        shm.sweep(prefix)
        claim.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
