"""The int8 recipes' cache keys: float layers named per model change a key, none leave it as it was.
Quantising itself: tests/integration/test_int8_models.py."""

from __future__ import annotations

import pytest

from models.quantize import FLOAT_LAYERS, Int8Recipe, int8_key

pytestmark = pytest.mark.unit


def test_a_recipe_without_float_layers_keeps_its_key() -> None:
    recipe = Int8Recipe(preset="mixed", transformer=True)
    assert "ignored_names" not in recipe.to_dict()
    floated = Int8Recipe(preset="mixed", transformer=True, ignored_names=("Conv.22",))
    assert floated.to_dict()["ignored_names"] == ["Conv.22"]
    assert int8_key("abc", recipe) != int8_key("abc", floated)


def test_the_default_recogniser_keeps_its_late_backbone_and_neck_convs_in_float() -> None:
    assert {"Conv.24", "Conv.32", "Conv.37"} <= set(FLOAT_LAYERS["PP-OCRv5_mobile_rec"])
    assert "Conv.22" not in FLOAT_LAYERS["PP-OCRv5_mobile_rec"]  # squeeze-excitation: int8
