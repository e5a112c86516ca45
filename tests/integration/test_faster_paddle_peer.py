"""faster-paddle 1.0.4, `make bench`'s in-process peer, on its real bundled models: the seam
`ocr-bench choice`'s smoke test fakes (`loadtest.bench.faster_paddle_peer.measure`)."""

from __future__ import annotations

from pathlib import Path

import cv2
import pytest

from loadtest.accuracy import cer
from loadtest.bench import faster_paddle_peer
from tests import images

pytest.importorskip("faster_paddle")


def test_tiny_reads_pages_alone_and_in_a_batch_in_a_process_of_its_own(tmp_path: Path) -> None:
    text = images.latin_lines()
    paths = []
    for name in ("a.png", "b.png"):
        assert cv2.imwrite(str(tmp_path / name), text.image)
        paths.append(tmp_path / name)
    got = faster_paddle_peer.measure("tiny", 1, paths)
    assert got["version"] == "1.0.4"
    assert got["config"]["threads"] == 1
    assert set(got["texts"]) == {"a.png", "b.png"}
    # Its lines are the page's: CER on the rendered lines at most 5% (no bound of ours; it
    # proves the lines are read and returned in order, not the model's accuracy).
    assert cer("\n".join(text.lines), "\n".join(got["texts"]["a.png"])) <= 0.05
    assert got["texts"]["a.png"] == got["texts"]["b.png"]
    assert got["alone_pages_s"] > 0
    assert got["batch_pages_s"] > 0
    assert 0 <= got["batch_changed"] <= 2
    assert got["batch_correct_pages_s"] <= got["batch_pages_s"]
    assert got["alone_core_s_a_page"] > 0
