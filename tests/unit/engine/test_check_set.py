"""The precision check's pages (`serving.engine.check_set`): which a model set is checked on, and
that what is read back is what was written. Built from the real fonts and PDFs:
tests/integration/test_precision_check_models.py (and `make convert`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from serving.engine.check_set import (
    REAL_LINE_PDFS,
    SYNTHETIC,
    CheckItem,
    build_check_set,
    ensure_check_set,
    load_check_set,
    write_check_set,
)

pytestmark = pytest.mark.unit


def _item(name: str, lang: str) -> CheckItem:
    return CheckItem(name, lang, np.full((8, 16, 3), 255, np.uint8), f"{name} text")


@pytest.fixture
def written(tmp_path: Path) -> Path:
    items = [_item("dense", SYNTHETIC), _item("guide-en", "en"), _item("guide-zh", "ch")]
    write_check_set(tmp_path / "v1", items, {"japan": "not installed"})
    return tmp_path / "v1"


def test_a_set_is_checked_on_its_languages_and_latin_sets_on_the_synthetic_pages(
    written: Path,
) -> None:
    check_set = load_check_set(written)
    assert check_set is not None
    assert check_set.languages == (SYNTHETIC, "en", "ch")
    assert check_set.for_languages({"ch", "en", "japan"}).languages == (SYNTHETIC, "en", "ch")
    assert check_set.for_languages({"ch", "en", "japan"}).missing == {"japan": "not installed"}
    assert check_set.for_languages({"fr"}).languages == (SYNTHETIC,)  # a Latin script
    assert check_set.for_languages({"korean"}).items == ()


def test_what_is_read_back_is_what_was_written(written: Path) -> None:
    check_set = load_check_set(written)
    assert check_set is not None
    assert [item.truth for item in check_set.items] == [
        "dense text",
        "guide-en text",
        "guide-zh text",
    ]
    assert check_set.items[0].image.shape == (8, 16, 3)
    assert load_check_set(written.parent / "none") is None
    (written / "guide-en.png").write_bytes((written / "guide-zh.png").read_bytes() + b"\0")
    with pytest.raises(ValueError, match="not the image the manifest names"):
        load_check_set(written)


def test_what_cannot_be_built_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No fonts, no guides (a machine without scripts/system-deps.sh): an empty set that says
    why, which the check then reports instead of measuring."""

    def no_font(*_: object) -> None:
        raise RuntimeError("font 'DejaVu Sans' not found")

    monkeypatch.setattr("serving.engine.check_set._synthetic_items", no_font)
    built = build_check_set(tmp_path / "v1", docs_root=tmp_path / "no-docs")
    assert built.items == ()
    assert built.missing[SYNTHETIC] == "font 'DejaVu Sans' not found"
    assert built.missing["ch"].endswith(
        "maint-guide.zh-cn.pdf is not installed (scripts/system-deps.sh)"
    )


def test_a_set_built_without_a_source_is_built_again_once_it_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make test` converts before scripts/system-deps.sh installs the guides: the set built
    then, without them, is rebuilt when they are there."""
    docs = tmp_path / "docs"
    monkeypatch.setattr("serving.engine.check_set._synthetic_items", lambda: [_item("d", "s")])
    first = ensure_check_set(tmp_path / "v1", docs)
    assert "en" in first.missing
    assert ensure_check_set(tmp_path / "v1", docs).digest == first.digest  # nothing new: kept
    guide = docs / REAL_LINE_PDFS["en"].relative_to("/")
    guide.parent.mkdir(parents=True)
    guide.write_bytes(b"%PDF-1.4 not a real guide")
    built: list[Path] = []
    monkeypatch.setattr(
        "serving.engine.check_set.build_check_set",
        lambda directory, root: built.append(directory) or first,
    )
    ensure_check_set(tmp_path / "v1", docs)
    assert built == [tmp_path / "v1"]
