"""How close recognised text is to a page's own text: character edits and merged words.

What the product measures its own reading with (the precision check each CPU runs:
`serving.engine.precision_check`) and the accuracy harness (`loadtest.accuracy`) reports. Both
texts are compared after NFKC: CER on the visible characters, merged words on the spaces between
letters and digits.
"""

from __future__ import annotations

import re
import unicodedata

from rapidfuzz.distance import Levenshtein

CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
"""Kana and CJK ideographs, as a regular-expression class body: written without spaces between
words."""
_CJK = re.compile(f"[{CJK_CHARS}]")


def normalize_text(text: str) -> str:
    """Normalise text for CER: NFKC, then drop all whitespace and control characters.

    NFKC folds compatibility forms: ligatures ("ﬁ" -> "fi", which PDF text layers often carry
    and OCR never returns), full-width ASCII ("，" -> ",", "１" -> "1", common in Chinese text),
    superscript digits ("⁴" -> "4") and no-break spaces. Whitespace is removed entirely rather
    than collapsed to one space, because OCR line breaks and inter-word spaces (and whether a
    recogniser emits a space at all, as PP-OCR often does not between Chinese characters) differ
    from the text layer's; CER then counts only visible characters. Typographic quotes and
    dashes are kept as they are: NFKC leaves "’" and "–" alone, and so does this function.
    """
    folded = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in folded if not ch.isspace() and unicodedata.category(ch) != "Cc")


def char_edits(reference: str, hypothesis: str) -> tuple[int, int]:
    """(Levenshtein edits, reference length) between the normalised texts."""
    ref, hyp = normalize_text(reference), normalize_text(hypothesis)
    return Levenshtein.distance(ref, hyp), len(ref)


def merged_words(reference: str, hypothesis: str) -> int:
    """Words of `reference` that `hypothesis` read as one ("Total amount" -> "Totalamount"): a
    space between two letters or digits of `reference` that the hypothesis lost (deleted, or
    replaced by another character). Both texts after NFKC with each run of whitespace (line
    breaks too) as one space; counted on their Levenshtein alignment. A space beside punctuation
    ("parser2array (const", "... describe") is spacing, not a word boundary a search depends on,
    and is not counted: on the bench pages bf16 and f32 differed only there (issue 41). Nor is a
    space beside a CJK character ("在 Build-Depends 中"): Chinese and Japanese are written
    without spaces, PP-OCR reads them without, and each CJK character is a word of its own
    (issue 46: f32 itself "merged" ten such on a few lines of the Chinese guide)."""
    ref, hyp = _spaced(reference), _spaced(hypothesis)
    return sum(
        1
        for op in Levenshtein.editops(ref, hyp)
        if op.tag in ("delete", "replace")
        and ref[op.src_pos] == " "
        and _word_char(ref[op.src_pos - 1])
        and _word_char(ref[op.src_pos + 1])
    )


def _spaced(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())


def _word_char(char: str) -> bool:
    """A letter or digit of a script written with spaces between words."""
    return char.isalnum() and _CJK.fullmatch(char) is None
