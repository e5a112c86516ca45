"""Which languages a recogniser reads, and which model reads a language, as PaddleOCR 3.7 says.

PaddleOCR picks its models from a `lang` code (`paddleocr/_pipelines/ocr.py`,
`_get_ocr_model_names`, with the groups of `paddleocr/_utils/langs.py`); this module holds the
same table the other way round: a recogniser's official name -> the codes PaddleOCR would serve
with it. A server reads the languages of the recognisers it has loaded
(`serving.model_sets`), and names the models to fetch for one it has not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def set_key(det_model_name: str, rec_model_name: str) -> str:
    """How `MEASURED_CER` names a model set: its detector's and recogniser's official names.

    >>> set_key("PP-OCRv6_small_det", "PP-OCRv6_small_rec")
    'PP-OCRv6_small_det+PP-OCRv6_small_rec'
    """
    return f"{det_model_name}+{rec_model_name}"


V6_SMALL: Final = set_key("PP-OCRv6_small_det", "PP-OCRv6_small_rec")
V5_MOBILE: Final = set_key("PP-OCRv5_mobile_det", "PP-OCRv5_mobile_rec")

MEASURED_CER: Final[Mapping[str, Mapping[str, float]]] = {
    "fr": {V6_SMALL: 0.27},
    "de": {V6_SMALL: 0.26},
    "es": {V6_SMALL: 0.60},
    "it": {V6_SMALL: 0.43},
    "japan": {V5_MOBILE: 1.56, V6_SMALL: 0.83},
    "ch": {V5_MOBILE: 0.72, V6_SMALL: 0.31},
    "en": {V5_MOBILE: 0.62, V6_SMALL: 0.48},
}
"""`lang` -> model set (`set_key`) -> its CER in percent on 4 pages of Debian's maint-guide in
that language (text layer as truth), at f32, the precision every CPU reads them at. Where every
set that reads a language is here, the one with the lowest CER reads it (`rank_sets`); otherwise
configuration order decides, the default first. A table rather than a measurement at start: it
takes minutes and the Debian PDFs, which a server does not have, and it holds for every server
that serves these models.

Measured 2026-12-07 (OpenVINO f32, 2 shared cores; 14 minutes) with
`ocr-bench languages --pages 4 --precision f32 --skip-turned --table`, which
prints these entries."""

LANG_ALIASES: Final = {"french": "fr", "german": "de"}
"""PaddleOCR's old codes for languages `MEASURED_CER` knows by their new ones."""


def rank_sets(lang: str, sets: Sequence[str]) -> list[int]:
    """The positions in `sets` (the `set_key`s of the sets that read `lang`, in configuration
    order, the default first), best first: by `MEASURED_CER` where it holds a CER for every one
    of them (ties keep configuration order), else in configuration order.

    >>> rank_sets("japan", [V5_MOBILE, V6_SMALL])
    [1, 0]
    >>> rank_sets("xx", ["a+b", "c+d"])
    [0, 1]
    """
    measured = MEASURED_CER.get(LANG_ALIASES.get(lang, lang), {})
    order = list(range(len(sets)))
    if all(key in measured for key in sets):
        order.sort(key=lambda i: measured[sets[i]])
    return order
