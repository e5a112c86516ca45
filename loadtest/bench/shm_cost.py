"""Cost of moving a page's tensors through shared memory (`serving.workers.shm`), per page.

`python -m loadtest.bench.shm_cost` times put + take of the arrays one 150 dpi page sends between
processes: the detector input, its probability map, and the recognition chunks.
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
    "det input": [((1, 3, 1760, 1248), np.float32)],
    "det map": [((1, 1760, 1248), np.float32)],
    "rec chunks": [((6, 3, 48, w), np.float32) for w in (1600, 1750, 1800, 1850, 1950, 2050, 2100)],
}


def main() -> int:
    """Print the median milliseconds of put + take per kind of array, and per page."""
    claim = shm.claim_prefix()  # owned while this runs; a server's start-up sweep takes the rest
    prefix = claim.prefix + "cost_"
    total = 0.0
    try:
        for name, shapes in PAGE.items():
            arrays = [np.random.rand(*shape).astype(dtype) for shape, dtype in shapes]
            runs = []
            for _ in range(7):
                started = time.perf_counter()
                for array in arrays:
                    shm.take(shm.put(array, prefix))
                runs.append(time.perf_counter() - started)
            median_ms = statistics.median(runs) * 1000
            mib = sum(a.nbytes for a in arrays) / 2**20
            total += median_ms
            print(f"{name:14s} {mib:6.1f} MiB  {median_ms:6.1f} ms")
        print(f"{'per page':14s}         {total:6.1f} ms")
    finally:
        shm.sweep(prefix)
        claim.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
