"""The server's real OCR path in this process: `OcrService` with its CPU stage functions run inline
and its inference answered at once by fake models, as a device worker answers (no processes).

Everything between the request and the models is the server's own code: admission, the memory
budget, `OcrService._page`'s step sequence, `serving.workers.cpu_stages` (shared memory
included) and the device worker's per-stage output handling (`device_worker.item_outcomes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

import numpy as np

from pipelines.stages import MODEL_STAGES
from serving.decode.readers import DecodeLimits
from serving.scheduling.admission import Admission
from serving.scheduling.batching import WorkItem
from serving.scheduling.memory_budget import MemoryBudget
from serving.service.ocr import OcrService
from serving.workers import cpu_stages, shm
from serving.workers.device_worker import collate, item_outcomes

T = TypeVar("T")

Model = Callable[[np.ndarray], np.ndarray]
"""Stage input batch -> the model's raw output, as a predictor's `run`."""


class InlineCpuPool:
    """Runs each stage function in this process, as `CpuPool.run` runs it in a worker."""

    async def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        priority: int = 0,
        holding: object = None,
        deadline: float | None = None,
    ) -> T:
        return fn(*args)


class InlineScheduler:
    """Answers each work item at once with its stage's model, as a device worker does, and frees
    its input as `DevicePool` does."""

    def __init__(self, models: Mapping[str, Model], prefix: str) -> None:
        self.models = models
        self.prefix = prefix
        self.stages: list[str] = []
        """The stage of every item submitted, in order."""

    def submit(self, item: WorkItem, *, front: bool = False) -> None:
        self.stages.append(item.stage)
        try:
            batch = np.empty(item.payload.shape, np.float32)
            collate(item.stage, [item.payload], batch)  # normalised, as a device worker does
            output = self.models[item.stage](batch)
            (outcome,) = item_outcomes(
                MODEL_STAGES[item.stage], output, [batch.shape[0]], self.prefix
            )
        finally:
            shm.discard(item.payload)
        item.future.set_result(outcome.value)

    def interactive_coming(self, priority: int) -> contextlib.nullcontext[None]:
        """Nothing waits on a hold here: every item is answered as it is submitted."""
        return contextlib.nullcontext()


def run_inline(
    work: Callable[[OcrService], Coroutine[Any, Any, T]],
    *,
    models: Mapping[str, Model],
    charset: tuple[str, ...],
    limits: DecodeLimits,
) -> T:
    """Run `work(service)` to its end on a new `OcrService` over `InlineCpuPool` and
    `InlineScheduler`, in a new event loop.

    Raises:
        AssertionError: a shared-memory segment was left behind.
    """
    prefix = f"test{uuid.uuid4().hex[:8]}_"
    cpu_stages.set_worker_state(charset, prefix)
    service = OcrService(
        cpu=InlineCpuPool(),  # type: ignore[arg-type]
        scheduler=InlineScheduler(models, prefix),  # type: ignore[arg-type]
        limits=limits,
        admission=Admission(max_pages=64),
        budget=MemoryBudget(1 << 34),
        prefix=prefix,
    )
    try:
        return asyncio.run(work(service))
    finally:
        left = shm.sweep(prefix)
        if left:
            raise AssertionError(f"{left} shared-memory segments left behind")
