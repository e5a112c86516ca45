"""uint8 pixels in, the float32 tensor PaddleX computes out, bit for bit (`pipelines.pixels`)."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.cls_preprocess import plan_cls_batches, preprocess_cls
from pipelines.det_preprocess import preprocess_det
from pipelines.page import prepare
from pipelines.pixels import Pixels, normalize, row_sizes
from pipelines.rec_preprocess import plan_rec_chunks, resize_norm_rec
from pipelines.types import ClsParams, DetParams, RecParams
from serving.workers import shm
from serving.workers.device_worker import collate

RNG = np.random.default_rng(31)

# The float32 code that ran in the CPU workers before pixels crossed processes as uint8.
_ALPHA = tuple(np.float32(1.0 / 255.0 / s) for s in (0.229, 0.224, 0.225))
_BETA = tuple(
    np.float32(-m / s) for m, s in zip((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), strict=True)
)


def _old_imagenet(hwc: np.ndarray) -> np.ndarray:
    out = np.empty((3, *hwc.shape[:2]), np.float32)
    for c in range(3):
        np.multiply(hwc[:, :, c], _ALPHA[c], out=out[c], dtype=np.float32)
        out[c] += _BETA[c]
    return out


def _old_rec(resized_hwc: np.ndarray, img_w: int) -> np.ndarray:
    norm = resized_hwc.astype(np.float32).transpose((2, 0, 1)) / 255
    norm -= 0.5
    norm /= 0.5
    padded = np.zeros((3, resized_hwc.shape[0], img_w), dtype=np.float32)
    padded[:, :, 0 : resized_hwc.shape[1]] = norm
    return padded


def _image(h: int, w: int) -> np.ndarray:
    return RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_det_and_cls_normalise_bit_for_bit_as_before() -> None:
    hwc = _image(64, 96)
    chw = np.ascontiguousarray(hwc.transpose((2, 0, 1)))[np.newaxis]
    for stage in ("det", "cls"):
        out = normalize(stage, chw)
        assert out.dtype == np.float32
        assert np.array_equal(out[0], _old_imagenet(hwc))  # every value, every bit
        assert out.tobytes() == _old_imagenet(hwc).tobytes()


def test_rec_normalises_and_pads_bit_for_bit_as_before() -> None:
    resized = _image(48, 130)
    pixels = np.zeros((1, 3, 48, 320), np.uint8)
    pixels[0, :, :, :130] = resized.transpose((2, 0, 1))
    pixels[0, :, :, 130:] = 200  # whatever the padding holds, it reads 0.0
    out = normalize("rec", pixels, ((48, 130),))
    assert out[0].tobytes() == _old_rec(resized, 320).tobytes()


def test_sizes_zero_rows_below_and_right_of_their_pixels() -> None:
    data = np.full((2, 3, 8, 10), 255, np.uint8)
    out = normalize("det", data, ((8, 10), (5, 7)))
    assert (out[0] != 0).all()
    assert (out[1, :, 5:, :] == 0).all()
    assert (out[1, :, :, 7:] == 0).all()
    assert (out[1, :, :5, :7] != 0).all()


def test_normalise_into_a_given_buffer_and_reject_bad_input() -> None:
    data = RNG.integers(0, 256, (2, 3, 4, 5), dtype=np.uint8)
    out = np.empty((2, 3, 4, 5), np.float32)
    assert normalize("det", data, out=out) is out
    assert np.array_equal(out, normalize("det", data))
    with pytest.raises(ValueError, match="uint8"):
        normalize("det", data.astype(np.float32))
    with pytest.raises(ValueError, match="cannot normalise"):
        normalize("det", data, out=np.empty((1, 3, 4, 5), np.float32))
    with pytest.raises(ValueError, match="sizes"):
        normalize("rec", data, ((4, 5),))


def test_row_sizes_of_stacked_inputs() -> None:
    assert row_sizes([(2, 3, 48, 320), (1, 3, 48, 320)], [(), ()]) == ()
    sizes = row_sizes([(2, 3, 48, 320), (1, 3, 48, 320)], [(), ((48, 100),)])
    assert sizes == ((48, 320), (48, 320), (48, 100))


def test_steps_carry_uint8_pixels_a_quarter_of_the_float_bytes() -> None:
    image = _image(300, 500)
    step = prepare(image, DetParams())
    (pixels,) = step.pixels
    assert pixels.data.dtype == np.uint8
    (tensor,) = step.inputs
    assert pixels.data.nbytes * 4 == tensor.nbytes
    assert np.array_equal(tensor[0], preprocess_det(image, DetParams()).tensor)


def test_rec_chunks_and_cls_batches_are_pixels_whose_tensors_are_unchanged() -> None:
    crops = [_image(30, w) for w in (40, 200, 90, 400, 31, 700, 150)]
    params = RecParams()
    for chunk in plan_rec_chunks(crops, params):
        assert chunk.pixels.data.dtype == np.uint8
        tensor = chunk.tensor
        for k, i in enumerate(chunk.indices):
            ratio = max(params.min_width / params.image_height, crops[i].shape[1] / 30)
            single = resize_norm_rec(crops[i], ratio, params)
            width = chunk.pixels.sizes[k][1]
            assert tensor[k, :, :, : single.shape[2]].tobytes() == single.tobytes()
            assert not tensor[k, :, :, width:].any()
    for indices, pixels in plan_cls_batches(crops, ClsParams()):
        for k, i in enumerate(indices):
            assert (
                pixels.normalized("cls")[k].tobytes()
                == preprocess_cls(crops[i], ClsParams()).tobytes()
            )


def test_device_worker_collates_pixels_into_the_model_input() -> None:
    claim = shm.claim_prefix()
    prefix = claim.prefix + "pixels_"
    try:
        first = Pixels(RNG.integers(0, 256, (2, 3, 48, 320), dtype=np.uint8), ((48, 320), (48, 90)))
        second = Pixels(RNG.integers(0, 256, (1, 3, 48, 320), dtype=np.uint8))
        refs = [shm.put(p.data, prefix, p.sizes) for p in (first, second)]
        assert refs[0].sizes == first.sizes
        assert refs[0].nbytes == first.data.nbytes
        out = np.empty((3, 3, 48, 320), np.float32)
        collate("rec", refs, out)
        assert np.array_equal(out[:2], first.normalized("rec"))
        assert np.array_equal(out[2:], second.normalized("rec"))
        # float32 inputs (a client of the old format) are copied as they are
        floats = shm.put(out, prefix)
        again = np.empty_like(out)
        collate("rec", [floats], again)
        assert np.array_equal(again, out)
        with pytest.raises(ValueError, match="inputs"):
            collate("rec", [refs[0], floats], np.empty((5, 3, 48, 320), np.float32))
    finally:
        shm.sweep(prefix)
        claim.release()


def test_shared_arrays_read_in_place_and_written_in_parts() -> None:
    claim = shm.claim_prefix()
    prefix = claim.prefix + "view_"
    try:
        page = _image(40, 60)
        ref = shm.put(page, prefix)
        seen = shm.view(ref)
        assert np.array_equal(seen, page)
        assert not seen.flags.writeable
        parts = [_image(3, 4), _image(5, 2)]
        flat = shm.view(shm.put_parts(parts, prefix))
        assert flat.shape == (3 * 4 * 3 + 5 * 2 * 3,)
        assert np.array_equal(flat[:36].reshape(3, 4, 3), parts[0])
        assert np.array_equal(flat[36:].reshape(5, 2, 3), parts[1])
    finally:
        shm.sweep(prefix)
        claim.release()
