"""The torch engine normalises uint8 pixels on its device to the host's float32 values, bit for
bit (`models.torch_backend.normalize_pixels`), from uint8 page-locked slots (`models.staging`).
On the torch CPU device here; the same gather runs on a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from models.staging import Lane, PixelInput
from pipelines.pixels import lookup_table, normalize

torch = pytest.importorskip("torch", reason="the torch extra (make install-test installs it)")

from models.torch_backend import TorchPredictor, normalize_pixels  # noqa: E402
from models.torch_device import CpuOps  # noqa: E402


@pytest.mark.parametrize("stage", ["det", "cls", "rec"])
def test_normalised_on_the_device_as_on_the_host(stage: str) -> None:
    pixels = np.random.default_rng(7).integers(0, 256, (3, 3, 48, 64), dtype=np.uint8)
    sizes = ((48, 64), (48, 20), (30, 64))
    table = torch.from_numpy(lookup_table(stage))  # type: ignore[arg-type]
    ours = normalize_pixels(torch, torch.from_numpy(pixels), table, sizes).numpy()
    host = normalize(stage, pixels, sizes)  # type: ignore[arg-type]
    assert ours.dtype == np.float32
    assert ours.tobytes() == host.tobytes()
    assert not ours[1, :, :, 20:].any()
    assert not ours[2, :, 30:, :].any()


def test_a_lane_stages_uint8_slots_a_quarter_of_the_bytes() -> None:
    lane = Lane(CpuOps(torch), max_slots=2)
    slot = lane.stage((2, 3, 48, 320), np.uint8)
    assert slot.input.dtype == np.uint8
    assert slot.input.nbytes * 4 == 2 * 3 * 48 * 320 * 4
    slot.sizes = ((48, 320), (48, 100))
    slot.release()
    again = lane.stage((2, 3, 48, 320))
    assert again.input.dtype == np.float32
    assert again.sizes == ()  # a fresh batch's pixels say their own


def test_the_torch_predictor_takes_pixels() -> None:
    assert issubclass(TorchPredictor, PixelInput)
