"""The text scores the precision check judges with (`pipelines.text_scores`); more cases, through
the accuracy harness that re-exports them: tests/unit/loadtest/test_accuracy.py."""

from __future__ import annotations

import pytest

from pipelines.text_scores import char_edits, merged_words

pytestmark = pytest.mark.unit


def test_a_space_beside_a_cjk_character_is_not_a_word_boundary() -> None:
    """Chinese is written without spaces: f32 itself read "在Build-Depends中" for the guide's
    "在 Build-Depends 中" (issue 46); two Latin words read as one inside Chinese text still
    count."""
    truth = "在 Build-Depends 中添加 autotools-dev 软件包"
    assert merged_words(truth, "在Build-Depends中添加autotools-dev软件包") == 0
    assert merged_words("使用 dh binary arch 命令", "使用dh binaryarch命令") == 1
    japanese = "dh_auto_configure は、./configure があれば"
    assert merged_words(japanese, japanese.replace(" ", "")) == 0


def test_char_edits_count_visible_characters_only() -> None:
    assert char_edits("Total amount", "Totalamount") == (0, 11)
    assert char_edits("价格为128元", "价格为12B元") == (1, 7)
