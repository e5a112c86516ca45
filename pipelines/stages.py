"""The page pipeline's model calls, and what each one's output is reduced to per item.

A model call runs on a batch that may hold the rows of several items (pages for ori and det, crop
chunks for cls and rec). `ModelStage.output` takes one item's rows of the raw output and returns
what the pipeline's next step (`pipelines.page`) reads; whoever runs the model, in process
(`pipelines.ocr.run_page`) or in a device worker, applies it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import numpy as np

from pipelines.rec_postprocess import reduce_rec_output, split_argmax_pairs

Stage = Literal["ori", "det", "cls", "rec"]

OutputT = TypeVar("OutputT")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelStage(Generic[OutputT]):
    """One model call of the page pipeline."""

    name: Stage
    output: Callable[[np.ndarray], OutputT]
    """One item's rows of the model's raw output -> what the next step takes."""
    large_output: bool
    """The output is as large as the page (the detection map), not a few numbers per row: a server
    passes it by reference rather than inline."""
    argmax_output: Callable[[np.ndarray], OutputT] | None = None
    """Set where `output` reads only the argmax of the raw output's last axis and its value:
    reads those from (..., 2) float32 [index, value] pairs instead, which an engine can compute
    where the model runs (`models.base.ArgmaxOutput`; on a GPU, 8 bytes a step copied back
    instead of 4 a class)."""
    byte_map_output: Callable[[np.ndarray], OutputT] | None = None
    """Set where `output` reads a probability map that DB post-processing can read as a byte map
    (`pipelines.det_byte_map`): reads that (..., 1, H, W) uint8 map instead, which an engine can
    quantise where the model runs (`models.base.ByteMapOutput`; on a GPU, a quarter of the
    float map's bytes copied back)."""

    def reading_argmax(self) -> ModelStage[OutputT]:
        """This stage for a model whose engine answers with the argmax pairs.

        Raises:
            ValueError: the stage reads more of its model's output than the argmax.
        """
        if self.argmax_output is None:
            raise ValueError(f"the {self.name} stage reads more than the argmax of its output")
        return dataclasses.replace(self, output=self.argmax_output, argmax_output=None)

    def reading_byte_map(self) -> ModelStage[OutputT]:
        """This stage for a model whose engine answers with a byte map.

        Raises:
            ValueError: the stage's output is not a map that can be read as bytes.
        """
        if self.byte_map_output is None:
            raise ValueError(f"the {self.name} stage does not read a byte map")
        return dataclasses.replace(self, output=self.byte_map_output, byte_map_output=None)


def _det_output(raw: np.ndarray) -> np.ndarray:
    """(n, 1, H, W) probability maps -> (n, H, W), float16: half the bytes a server moves back
    to its CPU workers. DB post-processing thresholds the map in float32 (`postprocess_det`), so
    a pixel's side of the threshold changes only within float16's rounding of it (2**-12 near
    0.3), and box scores (means over boxes) in their last bits: the boxes of the test pages are
    unchanged, or a corner a pixel off where a value next to the threshold rounds across it
    (`tests/integration/test_det_map_fp16.py`). Probabilities below float16's
    smallest normal value (2**-14) become 0: numpy converts subnormals 7x slower (0.13 s for a
    150 dpi page, most of whose map is near 0), and they move a box score by less than that."""
    if raw.ndim != 4 or raw.shape[1] != 1:
        raise ValueError(f"expected an (n, 1, H, W) detector output, got {raw.shape}")
    maps = raw[:, 0]
    tiny = np.float32(2**-14)
    return np.where(maps < tiny, np.float32(0), maps).astype(np.float16)


def _det_byte_map_output(raw: np.ndarray) -> np.ndarray:
    """(n, 1, H, W) byte maps -> (n, H, W), as they are (a view: no work on the worker's thread
    but the copy into shared memory)."""
    if raw.ndim != 4 or raw.shape[1] != 1 or raw.dtype != np.uint8:
        raise ValueError(f"expected an (n, 1, H, W) uint8 byte map, got {raw.shape} {raw.dtype}")
    return raw[:, 0]


def _cls_output(raw: np.ndarray) -> np.ndarray:
    """(n, num_classes) probabilities, as float32."""
    return np.ascontiguousarray(raw, dtype=np.float32)


ORI: ModelStage[np.ndarray] = ModelStage(name="ori", output=_cls_output, large_output=False)
"""Page orientation: one page a row (`pipelines.page_orientation`); the output is its class
probabilities."""
DET: ModelStage[np.ndarray] = ModelStage(
    name="det", output=_det_output, large_output=True, byte_map_output=_det_byte_map_output
)
"""Text detection: one page a row; the output is its DB probability map (float16), or the byte
map its engine quantised (`pipelines.det_byte_map`)."""
CLS: ModelStage[np.ndarray] = ModelStage(name="cls", output=_cls_output, large_output=False)
"""Textline orientation: one crop a row; the output is its class probabilities."""
REC: ModelStage[tuple[np.ndarray, np.ndarray]] = ModelStage(
    name="rec", output=reduce_rec_output, large_output=False, argmax_output=split_argmax_pairs
)
"""Text recognition: one crop a row; the output is its greedy CTC path (`reduce_rec_output`)."""

MODEL_STAGES: dict[str, ModelStage[Any]] = {s.name: s for s in (ORI, DET, CLS, REC)}
"""Stage name -> its definition."""
