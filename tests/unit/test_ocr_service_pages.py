"""A document's pages run together; when one fails, the others stop before the error is answered."""

from __future__ import annotations

import asyncio

import pytest

from serving.errors import InvalidInput
from serving.ocr_service import all_or_none


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
