"""Which engine errors leave the device unusable for the rest of the process.

A CUDA error such as an illegal memory access, a device-side assert or a launch failure is
sticky: the context is lost and every later call on it fails with the same error, so retrying
the batch in the same process cannot succeed. The device worker exits instead
(`serving.workers.device_worker.DEVICE_FAULT_EXIT_CODE`) and the pool starts a fresh process
with a fresh context. Out-of-memory errors are not sticky and stay ordinary batch failures.
Recognised by type name and message, so that neither torch nor Paddle is imported here.
"""

from __future__ import annotations

import re

_FATAL_TYPES = frozenset({"AcceleratorError"})
"""torch (2.8 and later) raises `torch.AcceleratorError` for errors a CUDA call returns."""

_FATAL_MESSAGE = re.compile(
    r"CUDA error|cudaError\w*|illegal memory access|illegal address|device-side assert"
    r"|unspecified launch failure|misaligned address|CUBLAS_STATUS_EXECUTION_FAILED"
    r"|CUDNN_STATUS_EXECUTION_FAILED",
    re.IGNORECASE,
)
_NOT_STICKY = re.compile(r"out of memory|ResourceExhausted", re.IGNORECASE)


def is_device_fault(err: BaseException) -> bool:
    """Whether `err`, or an error it was raised from or while handling, is a sticky device
    error (the engines wrap theirs: `models.lane_predictor.LanePredictor._failed`)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        message = str(current)
        if not _NOT_STICKY.search(message) and (
            type(current).__name__ in _FATAL_TYPES or _FATAL_MESSAGE.search(message)
        ):
            return True
        current = current.__cause__ or current.__context__
    return False
