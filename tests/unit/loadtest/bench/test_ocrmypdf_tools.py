"""The OCRmyPDF comparison's tool runs: a failed tool's reason is the line of its log that says
why, and a failed command raises it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loadtest.bench.ocrmypdf_tools import ToolFailed, failure_reason, timed

PADDLEX_LOG = """\
Creating model: ('PP-LCNet_x1_0_textline_ori', None)
No available model hosting platforms detected. Please check your network connection.
Traceback (most recent call last):
  File "paddlex/inference/utils/official_models.py", line 557, in _get_model_local_path
    raise Exception(msg)
Exception: No available model hosting platforms detected. Please check your network connection.
   Postprocessing...
"""


def test_the_reason_is_the_last_error_line() -> None:
    assert failure_reason(PADDLEX_LOG, 2) == (
        "exit 2: Exception: No available model hosting platforms detected. "
        "Please check your network connection."
    )
    assert failure_reason("ocrmypdf: error: unrecognized arguments: --x\n") == (
        "ocrmypdf: error: unrecognized arguments: --x"
    )


def test_without_an_error_line_the_last_line_says_it() -> None:
    assert failure_reason("start\n  killed  \n\n") == "killed"
    assert failure_reason("", 137) == "exit 137: no output"
    assert len(failure_reason("Error " + "x" * 500)) == 300


def test_a_failed_command_raises_its_reason(tmp_path: Path) -> None:
    code = "import sys; print('loading'); print('ValueError: bad page'); sys.exit(3)"
    with pytest.raises(ToolFailed) as failed:
        timed("tool", [sys.executable, "-c", code], tmp_path / "tool.log")
    assert failed.value.reason == "exit 3: ValueError: bad page"
    assert timed("tool", [sys.executable, "-c", "pass"], tmp_path / "ok.log") >= 0.0
