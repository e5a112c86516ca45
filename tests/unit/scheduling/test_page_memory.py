"""Pages decoded no larger than the pipeline needs, charged for all they make the server hold."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from loadtest.bench.memory_peak import hostile_pdf
from pipelines.types import DetParams
from serving.decode.documents import PagePlan, decode_page, page_plans, page_sizes
from serving.decode.readers import DecodeLimits, fit_side
from serving.errors import InvalidInput
from serving.scheduling.page_memory import (
    DEFAULT_ENGINE_BYTES_PER_DET_PX,
    ENGINE_BYTES_KEY,
    MIN_SCALED_SIDE_PX,
    PageCosts,
)
from tests import images

LIMITS = DecodeLimits(
    max_pdf_pages=4, pdf_render_scale=2.0, max_image_pixels=178_956_970, max_page_side_px=1000
)
UNCAPPED = dataclasses.replace(LIMITS, max_page_side_px=0)
DET = DetParams()


def test_a_big_pdf_page_renders_at_the_cap_and_says_what_it_was_sent_at() -> None:
    pdf = hostile_pdf(1, 30.0)  # 30 x 30 inches: 4320 x 4320 at 144 dpi
    (plan,) = page_plans(pdf, "pdf", LIMITS)
    assert plan == PagePlan(1000, 1000, 4320, 4320)
    assert plan.scaled
    assert decode_page(pdf, "pdf", 0, LIMITS).shape == (1000, 1000, 3)
    assert page_sizes(pdf, "pdf", UNCAPPED) == [(4320, 4320)]


def test_an_oblong_pdf_page_keeps_its_shape_and_the_plan_is_the_rendered_size() -> None:
    pdf = images.make_pdf([images.empty_page(1500, 600)], dpi=72.0)  # 1500 x 600 pt
    (plan,) = page_plans(pdf, "pdf", LIMITS)
    page = decode_page(pdf, "pdf", 0, LIMITS)
    assert (plan.width, plan.height) == (page.shape[1], page.shape[0]) == (1000, 400)
    assert (plan.full_width, plan.full_height) == (3000, 1200)


def test_pages_within_the_cap_decode_byte_for_byte_as_before() -> None:
    """A4 at 144 dpi (1191 x 1684) is far under the server's default cap of 4000."""
    a4 = images.make_pdf([images.latin_lines().image], dpi=144.0)
    capped = dataclasses.replace(LIMITS, max_page_side_px=4000)
    (plan,) = page_plans(a4, "pdf", capped)
    assert not plan.scaled
    assert np.array_equal(decode_page(a4, "pdf", 0, capped), decode_page(a4, "pdf", 0, UNCAPPED))
    png = images.encode_png(images.latin_lines().image)
    assert np.array_equal(decode_page(png, "image", 0, capped), images.latin_lines().image)


def test_a_big_image_is_downscaled_right_after_decoding() -> None:
    image = np.full((900, 2400, 3), 255, np.uint8)
    image[400:500, 100:2300] = 0
    png = images.encode_png(image)
    (plan,) = page_plans(png, "image", LIMITS)
    assert plan == PagePlan(1000, 375, 2400, 900)
    page = decode_page(png, "image", 0, LIMITS)
    assert page.shape == (375, 1000, 3)
    assert page[187, 500].tolist() == [0, 0, 0]  # the black band is still there


def test_the_pixel_cap_is_checked_on_the_page_as_sent() -> None:
    tight = dataclasses.replace(LIMITS, max_image_pixels=4_000_000)
    with pytest.raises(InvalidInput, match="max_image_pixels"):
        page_plans(hostile_pdf(1, 30.0), "pdf", tight)


def test_fit_side() -> None:
    assert fit_side(1191, 1684, 4000) == (1191, 1684)
    assert fit_side(13248, 13248, 4000) == (4000, 4000)
    assert fit_side(3, 9000, 900) == (1, 900)
    assert fit_side(5000, 100, 0) == (5000, 100)


def test_a_page_is_charged_for_every_process_and_the_engine() -> None:
    costs = PageCosts(engine_bytes_per_det_px=150.0)
    plan = PagePlan(4000, 4000, 13248, 13248)
    pixels = 4000 * 4000
    # decode 7 + page, copy, crops 21 per page pixel; 39 + 150 per detector pixel (4000 x 4000).
    assert costs.page_bytes(plan, "pdf", DET) == 28 * pixels + 189 * pixels
    # An image is decoded as sent first: 10 bytes a pixel as sent.
    image = costs.page_bytes(plan, "image", DET) - costs.page_bytes(plan, "pdf", DET)
    assert image == 10 * 13248 * 13248 - 7 * pixels


def test_a_page_over_the_budget_gets_the_largest_side_that_fits() -> None:
    costs = PageCosts()
    plan = PagePlan(4000, 4000, 13248, 13248)
    budget = 1 << 30
    side = costs.fit(plan, "pdf", DET, budget)
    assert side is not None
    assert MIN_SCALED_SIDE_PX <= side < 4000
    assert (
        costs.at_side(side, plan, "pdf", DET) <= budget < costs.at_side(side + 1, plan, "pdf", DET)
    )
    assert costs.fit(plan, "pdf", DET, costs.page_bytes(plan, "pdf", DET)) == 4000
    # Not even at the smallest side: refused.
    assert (
        costs.fit(plan, "pdf", DET, costs.at_side(MIN_SCALED_SIDE_PX, plan, "pdf", DET) - 1) is None
    )


def test_the_largest_measured_engine_cost_is_charged() -> None:
    assert PageCosts.measured([{}, {}]).engine_bytes_per_det_px == DEFAULT_ENGINE_BYTES_PER_DET_PX
    infos = [{ENGINE_BYTES_KEY: 120.5}, {}, {ENGINE_BYTES_KEY: 190.0}]
    assert PageCosts.measured(infos).engine_bytes_per_det_px == 190.0
