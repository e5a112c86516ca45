"""`models.staging.DeviceOps` for PyTorch: CUDA streams and page-locked memory, or the CPU.

Imported only where torch is installed (the `torch` extra); `torch` is passed in, so nothing
here imports it at module load.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class CudaOps:
    """One CUDA device through torch: `torch.cuda.Stream`s, `torch.cuda.Event`s, page-locked
    host memory from torch's pinned allocator, and `non_blocking` copies.

    Device arrays made on one stream and used on another are marked with `record_stream`, so
    torch's caching allocator does not hand their memory out again before that stream is done.
    """

    def __init__(self, torch: Any, device: str = "cuda:0") -> None:
        self.torch = torch
        self.device = torch.device(device)

    def new_stream(self) -> Any:
        return self.torch.cuda.Stream(device=self.device)

    def pinned_host(self, nbytes: int) -> np.ndarray:
        # The array keeps the tensor (and so the page-locked block) alive.
        pinned = self.torch.empty(nbytes, dtype=self.torch.uint8, pin_memory=True)
        array: np.ndarray = pinned.numpy()
        return array

    def record(self, stream: Any) -> Any:
        # Blocking: a host that waits on it sleeps until the device signals it, where a default
        # event spins a core at 100 % for the whole batch, a core the CPU workers need.
        event = self.torch.cuda.Event(blocking=True)
        event.record(stream)
        return event

    def wait(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def upload(self, host: np.ndarray, stream: Any) -> Any:
        with self.torch.cuda.stream(stream):
            return self.torch.from_numpy(host).to(self.device, non_blocking=True)

    def compute(self, fn: Callable[[Any], Any], x: Any, stream: Any) -> Any:
        with self.torch.cuda.stream(stream):
            x.record_stream(stream)
            return fn(x)

    def output_shape(self, y: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in y.shape)

    def download(self, y: Any, host: np.ndarray, stream: Any) -> None:
        with self.torch.cuda.stream(stream):
            y.record_stream(stream)
            self.torch.from_numpy(host).copy_(y, non_blocking=True)


class _Done:
    """A CPU "event": the work was done when it was issued."""

    def synchronize(self) -> None:
        return None


class CpuOps:
    """The CPU through torch: no streams, work runs when issued; the input is used in place."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def new_stream(self) -> Any:
        return None

    def pinned_host(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def record(self, stream: Any) -> _Done:
        return _Done()

    def wait(self, stream: Any, event: Any) -> None:
        return None

    def upload(self, host: np.ndarray, stream: Any) -> Any:
        return self.torch.from_numpy(host)

    def compute(self, fn: Callable[[Any], Any], x: Any, stream: Any) -> Any:
        return fn(x)

    def output_shape(self, y: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in y.shape)

    def download(self, y: Any, host: np.ndarray, stream: Any) -> None:
        # A copy into the host buffer, as CUDA's: torch reads no value into Python (`.numpy()`
        # would count as a host read in tests/integration/test_torch_host_reads.py).
        self.torch.from_numpy(host).copy_(y)
