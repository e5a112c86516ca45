"""Batch shapes: what the server pads so that work from different pages and requests batches.

The scheduler batches only items of one shape (`serving.scheduling.batching`: det by padded
H x W, rec and cls by padded width). PaddleOCR pads each page's recognition chunk to its widest
crop and runs each page at its own size, so shapes rarely repeat across pages: on a GPU, rec
batches held a few rows where 96 fit, and det batches about one page. `[engine] batching`:

- "exact": PaddleOCR's padding, PaddleOCR's text. The CPU default.
- "bucketed": each crop padded to the first of a few widths that holds it, and each page's
  detector input to a multiple of a step (`BatchShapes`), so rows of many pages share a batch.
  A crop then reads the same whatever its companions; the text differs from exact mode only by
  the padding (the bench's CER per language: `ocr-bench batching`).
- "auto": bucketed where a GPU serves (its batches are cheap to fill and dear to leave empty),
  exact on CPU-only servers.

The buckets are the torch engine's (`[engine.torch] rec_widths_px`, `det_step_px`), whatever the
backend: a compiled torch model then meets only shapes it was prepared for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from models.torch_options import TorchOptions
from serving.config import BatchingSetting

BatchingMode = Literal["exact", "bucketed"]
"""What "auto" resolves to for a server's devices."""


def batching_mode(setting: BatchingSetting, device_kinds: Iterable[str]) -> BatchingMode:
    """The mode a server whose device workers are of `device_kinds` ("cpu", "gpu") runs in:
    `setting` itself, or for "auto" bucketed when any of them is a GPU, else exact."""
    if setting == "auto":
        return "bucketed" if "gpu" in set(device_kinds) else "exact"
    return setting


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchShapes:
    """Bucketed batching's padding targets, set in a request's options when they are built
    (`serving.request_options.ocr_options`)."""

    rec_widths_px: tuple[int, ...]
    """Recogniser width buckets, ascending (`pipelines.types.RecParams.pad_widths_px`)."""
    det_step_px: int
    """Detector inputs' sides rounded up to a multiple of this (`DetParams.pad_step_px`)."""

    @classmethod
    def of(cls, mode: BatchingMode, torch: TorchOptions) -> BatchShapes | None:
        """The shapes of `mode` with the torch engine's buckets; None in exact mode."""
        if mode == "exact":
            return None
        return cls(rec_widths_px=torch.rec_widths_px, det_step_px=torch.det_step_px)
