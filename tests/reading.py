"""What users get, read with a bound: the e2e servers run `openvino_precision = "auto"`, which is
f32 on some CPUs and bf16 (its recogniser's CTC head in f32) on others, and bf16 may read a
character of the synthetic pages differently (issue 41). Tests of Paddle's exact text pin f32
(tests/integration/test_onnx_engines.py, test_ocr_vs_paddleocr.py); these check that every line
was read, within a CER bound, with no two words read as one."""

from __future__ import annotations

from collections.abc import Sequence

from loadtest.accuracy import cer, merged_words

MAX_CER = 0.02
"""One character in fifty: the synthetic pages read exactly at f32."""


def assert_reads(
    texts: Sequence[str], truth: Sequence[str], *, max_cer: float = MAX_CER, spaces: bool = True
) -> None:
    """`texts` read `truth` line for line, within `max_cer`, and (with `spaces`) with no merged
    words."""
    assert len(texts) == len(truth), (texts, truth)
    joined, expected = "\n".join(texts), "\n".join(truth)
    assert cer(expected, joined) <= max_cer, (texts, truth)
    if spaces:
        assert merged_words(expected, joined) == 0, (texts, truth)
