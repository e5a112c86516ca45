"""The detector's probability map as bytes: quantised where the model runs, exact at the threshold.

A torch engine on a GPU answers the DB map as uint8 (`models.base.ByteMapOutput`, issue 40) in
place of float32: a quarter of the bytes over the device-to-host copy and through shared memory,
and no float map for the device worker's one Python thread to convert (`pipelines.stages.DET`'s
float16 map: about 15 ms a page). A probability `p` becomes `q = round(p * 254)`, except next to
the threshold, where it is pushed to its side of it: with `T = byte_map_level(thresh)`,
`q > T` exactly where `p > thresh` (in float32, as `postprocess_det` thresholds a float map), so
DB post-processing finds the same bitmap, hence the same contours. A box score read as
`mean(q) / 254` is within 1/254 of the float map's: each pixel's `q / 254` is (within 0.5/254
where rounded, under 1/254 where pushed).

The map is exact for one threshold, the engine's (`[pipeline.det] thresh`): a request that asks
for another reads the bitmap at `byte_map_level` of its own, whose pixels differ from `p > thresh`
only where `p` lies within 1/254 of it.
"""

from __future__ import annotations

import math

import numpy as np

BYTE_MAP_SCALE = 254
"""Map bytes per unit of probability: 254, not 255, so that a level above every rounded
probability's is left for a threshold of 1."""


def byte_map_level(thresh: float) -> int:
    """T for `thresh`: a byte map's pixel is above the threshold where its value exceeds T."""
    return min(BYTE_MAP_SCALE, max(0, math.floor(thresh * BYTE_MAP_SCALE)))


def quantize_map(prob: np.ndarray, thresh: float) -> np.ndarray:
    """The byte map of a float probability map, as the engines compute it on their devices
    (`models.torch_backend.quantize_on_device`): uint8, `q > byte_map_level(thresh)` exactly
    where `prob > float32(thresh)`."""
    level = byte_map_level(thresh)
    prob = np.asarray(prob, dtype=np.float32)
    rounded = np.clip(np.round(prob * np.float32(BYTE_MAP_SCALE)), 0, BYTE_MAP_SCALE)
    above = prob > np.float32(thresh)
    pushed = np.where(above, np.maximum(rounded, level + 1), np.minimum(rounded, level))
    return pushed.astype(np.uint8)
