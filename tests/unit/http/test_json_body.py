"""`/ocr`'s body checks before parsing (`serving.http.json_body`): containers, separators, and
what the parse takes."""

from __future__ import annotations

import asyncio
import json

import pytest

from serving.errors import PayloadTooLarge, ValidationFailed
from serving.http.json_body import (
    MAX_SEPARATORS,
    OFF_LOOP_BYTES,
    WIDE_PARSE_COPIES,
    load,
    load_checked,
    parse_bytes,
    separators_within,
)
from serving.scheduling.memory_budget import BodyCharge, MemoryBudget


def test_a_request_body_passes_and_a_flat_object_does_not() -> None:
    body = json.dumps({"file": "QUJD" * 1000, "fileType": 1, "logId": "a:b,c"}).encode()
    assert load_checked(body)["fileType"] == 1
    flat = json.dumps({f"k{i}": 0 for i in range(MAX_SEPARATORS)}).encode()
    assert not separators_within(flat)
    with pytest.raises(ValidationFailed, match="',' and ':'"):
        load_checked(flat)


def test_the_parse_of_a_wide_text_is_charged() -> None:
    ascii_body = b'{"file": "' + b"A" * OFF_LOOP_BYTES + b'"}'
    assert parse_bytes(ascii_body) == 0
    wide = ascii_body.replace(b'"}', '\U0001f600"}'.encode())
    assert parse_bytes(wide) == (WIDE_PARSE_COPIES - 2) * len(wide)
    assert parse_bytes(ascii_body.replace(b'"}', b'\\u0101"}')) > 0

    async def main() -> None:
        budget = MemoryBudget(40 * len(wide))
        with BodyCharge(budget, copies=3) as charge:
            charge.add(len(wide))
            await load(wide, charge)
            assert charge.held_bytes == (3 + WIDE_PARSE_COPIES - 2) * len(wide)
        assert budget.used_bytes == 0
        small = MemoryBudget(12 * len(wide))  # bodies may hold 6 bytes per body byte
        with BodyCharge(small, copies=3) as charge:
            charge.add(len(wide))
            with pytest.raises(PayloadTooLarge, match=r"server\.memory_budget_bytes"):
                await load(wide, charge)

    asyncio.run(main())
