"""Which languages a recogniser reads, and which model reads a language, as PaddleOCR 3.7 says.

PaddleOCR picks its models from a `lang` code (`paddleocr/_pipelines/ocr.py`,
`_get_ocr_model_names`, with the groups of `paddleocr/_utils/langs.py`); this module holds the
same table the other way round: a recogniser's official name -> the codes PaddleOCR would serve
with it. A server reads the languages of the recognisers it has loaded
(`serving.model_sets`), and names the models to fetch for one it has not.
"""

from __future__ import annotations

from typing import Final

LATIN_LANGS: Final = frozenset(
    {
        "af", "az", "bs", "cs", "cy", "da", "de", "es", "et", "fr", "ga", "hr", "hu", "id",
        "is", "it", "ku", "la", "lt", "lv", "mi", "ms", "mt", "nl", "no", "oc", "pi", "pl",
        "pt", "ro", "rs_latin", "sk", "sl", "sq", "sv", "sw", "tl", "tr", "uz", "vi",
        "french", "german", "fi", "eu", "gl", "lb", "rm", "ca", "qu",
    }
)  # fmt: skip
"""PaddleOCR 3.7's `LATIN_LANGS`, `french` and `german` (its old codes) included."""
ARABIC_LANGS: Final = frozenset({"ar", "fa", "ug", "ur", "ps", "ku", "sd", "bal"})
ESLAV_LANGS: Final = frozenset({"ru", "be", "uk"})
CYRILLIC_LANGS: Final = frozenset(
    {
        "ru", "rs_cyrillic", "be", "bg", "uk", "mn", "abq", "ady", "kbd", "ava", "dar", "inh",
        "che", "lbe", "lez", "tab", "kk", "ky", "tg", "mk", "tt", "cv", "ba", "mhr", "mo",
        "udm", "kv", "os", "bua", "xal", "tyv", "sah", "kaa",
    }
)  # fmt: skip
DEVANAGARI_LANGS: Final = frozenset(
    {"hi", "mr", "ne", "bh", "mai", "ang", "bho", "mah", "sck", "new", "gom", "sa", "bgc"}
)
CJK_LANGS: Final = frozenset({"ch", "chinese_cht", "en", "japan"})
"""What PP-OCRv5's and PP-OCRv6's general recognisers read (PaddleOCR maps `ch`,
`chinese_cht` and `japan` to PP-OCRv5_server_rec, and its dictionary holds English)."""
PPOCRV6_LANGS: Final = CJK_LANGS | (LATIN_LANGS - {"pi"})
"""PaddleOCR 3.7's `_PPOCRV6_LANGS`: PP-OCRv6's one recogniser reads these."""

_V5_SCRIPTS: Final = {
    "latin": LATIN_LANGS,
    "eslav": ESLAV_LANGS,
    "arabic": ARABIC_LANGS,
    "cyrillic": CYRILLIC_LANGS,
    "devanagari": DEVANAGARI_LANGS,
    "korean": frozenset({"korean"}),
    "th": frozenset({"th"}),
    "el": frozenset({"el"}),
    "te": frozenset({"te"}),
    "ta": frozenset({"ta"}),
    "en": frozenset({"en"}),
}
"""PP-OCRv5's language recognisers, `<script>_PP-OCRv5_mobile_rec`, and what each reads."""

ALL_LANGS: Final = frozenset().union(PPOCRV6_LANGS, *_V5_SCRIPTS.values())
"""Every code PaddleOCR 3.7 serves with a PP-OCRv5 or PP-OCRv6 recogniser."""


def languages_of(rec_model_name: str) -> frozenset[str]:
    """The `lang` codes PaddleOCR serves with the recogniser named `rec_model_name` (its
    official name, `Global.model_name` in its inference.yml); empty for a name it does not use.

    >>> sorted(languages_of("PP-OCRv5_mobile_rec"))
    ['ch', 'chinese_cht', 'en', 'japan']
    >>> "fr" in languages_of("PP-OCRv6_small_rec"), "fr" in languages_of("PP-OCRv5_mobile_rec")
    (True, False)
    """
    if rec_model_name.startswith("PP-OCRv6_"):
        return PPOCRV6_LANGS
    if rec_model_name in ("PP-OCRv5_mobile_rec", "PP-OCRv5_server_rec"):
        return CJK_LANGS
    script, _, rest = rec_model_name.partition("_")
    if rest == "PP-OCRv5_mobile_rec" and script in _V5_SCRIPTS:
        return _V5_SCRIPTS[script]
    return frozenset()


def models_for(lang: str) -> tuple[str, ...]:
    """The official recogniser (and detector) names that read `lang`, to fetch with
    `python -m models.fetch`: PaddleOCR's own choice first (PP-OCRv6 medium where it reads the
    language, else PP-OCRv5's recogniser for its script); () for a code PaddleOCR does not know.

    >>> models_for("fr")
    ('PP-OCRv6_medium_det', 'PP-OCRv6_medium_rec', 'latin_PP-OCRv5_mobile_rec')
    >>> models_for("korean")
    ('korean_PP-OCRv5_mobile_rec',)
    """
    names: list[str] = []
    if lang in PPOCRV6_LANGS:
        names += ["PP-OCRv6_medium_det", "PP-OCRv6_medium_rec"]
    names += [f"{s}_PP-OCRv5_mobile_rec" for s, langs in _V5_SCRIPTS.items() if lang in langs]
    if lang in CJK_LANGS - {"en"}:
        names.append("PP-OCRv5_server_rec")
    return tuple(names)
