"""A document's pages run together; when one fails, the others stop before the error is answered."""

from __future__ import annotations

import asyncio
import contextlib
import types
from collections.abc import Iterator
from typing import Any

import pytest

from pipelines.types import DetParams
from serving.decode.documents import PagePlan
from serving.decode.readers import DecodeLimits
from serving.errors import InvalidInput
from serving.scheduling.admission import Admission
from serving.scheduling.memory_budget import MemoryBudget
from serving.scheduling.page_memory import PageCosts
from serving.scheduling.priorities import INTERACTIVE
from serving.service.ocr import (
    TURNED_COPY_BYTES_PER_PX,
    OcrService,
    PageCharge,
    PageOutput,
    all_or_none,
)


def test_a_failing_page_cancels_its_siblings_before_the_error_propagates() -> None:
    cancelled: list[int] = []

    async def page(index: int) -> int:
        if index == 1:
            raise InvalidInput("page 2 does not decode")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(index)
            raise
        return index

    async def main() -> None:
        with pytest.raises(InvalidInput, match="page 2"):
            await all_or_none(page(i) for i in range(4))
        # By the time the caller frees the document, no page is still reading it.
        assert sorted(cancelled) == [0, 2, 3]

    asyncio.run(main())


def test_pages_answer_in_order() -> None:
    async def page(index: int) -> int:
        await asyncio.sleep(0.001 * (3 - index))
        return index

    assert asyncio.run(all_or_none(page(i) for i in range(4))) == [0, 1, 2, 3]


class _Cpu:
    """Stands in for the CPU pool: every call answers a page without shared memory."""

    async def run(self, *_args: object, **_kwargs: object) -> object:
        return object()


class _Scheduler:
    @contextlib.contextmanager
    def interactive_coming(self, _priority: int) -> Iterator[None]:
        yield


def test_a_page_gives_back_what_its_detection_held_once_detection_is_done() -> None:
    """The detector's input, map and engine memory are charged before the page is decoded and
    given back when detection ends, not when the page's result is assembled: a page waiting on
    recognition leaves room for another page's detection."""
    budget = MemoryBudget(1000)
    service = OcrService(
        cpu=_Cpu(),  # type: ignore[arg-type]
        scheduler=_Scheduler(),  # type: ignore[arg-type]
        limits=DecodeLimits(max_pdf_pages=1, pdf_render_scale=1.0, max_image_pixels=1),
        admission=Admission(max_pages=4),
        budget=budget,
        prefix="test_ocr_service_pages_",
    )
    seen: list[int] = []

    async def page_steps(*args: Any) -> PageOutput:
        detection_done = args[-1]
        seen.append(budget.used_bytes)
        detection_done()
        seen.append(budget.used_bytes)
        detection_done()  # once only
        seen.append(budget.used_bytes)
        return PageOutput(result=None, images={})  # type: ignore[arg-type]

    service._page = page_steps  # type: ignore[method-assign]
    charge = PageCharge(cost=700, det_cost=600, limits=service.limits, sent=None)

    options = types.SimpleNamespace(det=None, ori=None, stages={})  # the default model set

    async def main() -> None:
        await service._document_page(
            b"",
            "image",
            0,
            charge,
            options,  # type: ignore[arg-type]
            False,
            0.0,
            INTERACTIVE,
        )

    asyncio.run(main())
    assert seen == [700, 100, 100]
    assert budget.used_bytes == 0


def test_a_page_that_may_be_turned_is_charged_its_upright_copy() -> None:
    service = OcrService(
        cpu=_Cpu(),  # type: ignore[arg-type]
        scheduler=_Scheduler(),  # type: ignore[arg-type]
        limits=DecodeLimits(max_pdf_pages=1, pdf_render_scale=1.0, max_image_pixels=10**8),
        admission=Admission(max_pages=4),
        budget=MemoryBudget(10**10),
        prefix="test_ocr_service_pages_",
    )
    plan = PagePlan(width=400, height=300, full_width=400, full_height=300)
    as_sent = service.charge(plan, "image", DetParams())
    turned = service.charge(plan, "image", DetParams(), turned=True)
    assert turned.cost - as_sent.cost == TURNED_COPY_BYTES_PER_PX * 400 * 300
    assert turned.det_cost == as_sent.det_cost


def test_a_scaled_page_is_fitted_with_its_upright_copy() -> None:
    """Issue 49: the side was fitted to the budget without the copy, then the copy's few MB
    took the charge past it, and the page got 413 though a smaller side fitted."""
    plan = PagePlan(width=4000, height=4000, full_width=8000, full_height=8000)
    costs = PageCosts(engine_bytes_per_det_px=23.0)
    total = costs.at_side(2600, plan, "image", DetParams())  # fits at 2600 without the copy
    service = OcrService(
        cpu=_Cpu(),  # type: ignore[arg-type]
        scheduler=_Scheduler(),  # type: ignore[arg-type]
        limits=DecodeLimits(max_pdf_pages=1, pdf_render_scale=1.0, max_image_pixels=10**8),
        admission=Admission(max_pages=4),
        budget=MemoryBudget(total),
        prefix="test_ocr_service_pages_",
        page_costs=lambda: costs,
    )
    charge = service.charge(plan, "image", DetParams(), turned=True)
    assert charge.cost <= total  # before: over it, and 413
    assert charge.limits.max_page_side_px < 2600
