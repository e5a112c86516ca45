"""The int8 recipes' cache keys: float layers named per model change a key, none leave it as it was.
Quantising itself: tests/integration/test_int8_models.py."""

from __future__ import annotations

import pytest

from models.embedded import embedded_model_dir
from models.quantize import FLOAT_LAYERS, Int8Recipe, int8_key, recipe_for
from models.spec import load_model_spec

pytestmark = pytest.mark.unit


def test_a_recipe_without_float_layers_keeps_its_key() -> None:
    recipe = Int8Recipe(preset="mixed", transformer=True)
    assert "ignored_names" not in recipe.to_dict()
    floated = Int8Recipe(preset="mixed", transformer=True, ignored_names=("Conv.22",))
    assert floated.to_dict()["ignored_names"] == ["Conv.22"]
    assert int8_key("abc", recipe) != int8_key("abc", floated)


def test_the_default_sets_recogniser_is_quantised_without_bias_correction() -> None:
    """Issue 46 item 5: PP-OCRv6 small's recogniser merged words with NNCF's bias correction."""
    spec = load_model_spec(embedded_model_dir("PP-OCRv6_small_rec"), "rec")
    recipe = recipe_for(spec)
    assert (recipe.preset, recipe.transformer, recipe.bias_correction) == ("mixed", True, False)
    assert recipe.to_dict()["bias_correction"] is False
    # Recipes with bias correction keep the key they had before the field.
    assert "bias_correction" not in Int8Recipe().to_dict()
    assert int8_key("abc", recipe) != int8_key("abc", Int8Recipe(preset="mixed", transformer=True))


def test_the_v5_recogniser_keeps_its_late_backbone_and_neck_convs_in_float() -> None:
    assert {"Conv.24", "Conv.32", "Conv.37"} <= set(FLOAT_LAYERS["PP-OCRv5_mobile_rec"])
    assert "Conv.22" not in FLOAT_LAYERS["PP-OCRv5_mobile_rec"]  # squeeze-excitation: int8
