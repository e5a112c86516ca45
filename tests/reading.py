"""What users get, read with a bound: the e2e servers run `openvino_precision = "auto"`, which is
f32 on some CPUs and bf16 (its recogniser's CTC head in f32) on others, and bf16 may read a
character of the synthetic pages differently (issue 41). Tests of Paddle's exact text pin f32
(tests/integration/test_onnx_engines.py, test_ocr_vs_paddleocr.py); these check that every line
was read, within a CER bound, with no two words read as one."""

from __future__ import annotations

import os
from collections.abc import Sequence

from loadtest.accuracy import cer, merged_words
from models.openvino_precision import has_bf16

MAX_CER = 0.02
"""One character in fifty: the synthetic pages read exactly at f32."""


def recogniser_at_bf16() -> bool:
    """Whether the servers the tests start run their recogniser at bf16: only where the suite is
    run with `OCR_ENGINE__OPENVINO_PRECISION=bf16` on a CPU with bf16 ("auto" keeps it at f32).
    Then a word may merge ("Totalamount" on the JPEG page): the cost docs/performance.md
    measures, and why "auto" does not take it."""
    if os.environ.get("OCR_ENGINE__OPENVINO_PRECISION") != "bf16":
        return False
    try:
        import openvino
    except ImportError:
        return False
    return has_bf16(openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def assert_reads(
    texts: Sequence[str], truth: Sequence[str], *, max_cer: float = MAX_CER, spaces: bool = True
) -> None:
    """`texts` read `truth` line for line, within `max_cer`, and (with `spaces`) with no merged
    words, unless the recogniser runs at bf16 (`recogniser_at_bf16`)."""
    assert len(texts) == len(truth), (texts, truth)
    joined, expected = "\n".join(texts), "\n".join(truth)
    assert cer(expected, joined) <= max_cer, (texts, truth)
    if spaces and not recogniser_at_bf16():
        assert merged_words(expected, joined) == 0, (texts, truth)
