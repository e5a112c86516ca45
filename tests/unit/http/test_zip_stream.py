"""`ZipStream`: a zip made member by member, read back whole by `zipfile` and by Info-ZIP's
`unzip -t`, with each member's bytes sent as they are compressed."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from serving.http.zip_stream import ZipStream


def _archive(members: list[tuple[str, list[bytes], bool]]) -> tuple[bytes, list[int]]:
    stream = ZipStream()
    chunks: list[bytes] = []
    for name, data, compress in members:
        chunks.extend(stream.member(name, data, compress=compress))
    chunks.append(stream.close())
    return b"".join(chunks), [len(c) for c in chunks]


def test_members_read_back_as_written() -> None:
    pdf = os.urandom(1 << 20)
    text = "première ligne\n".encode() * 5000
    data, _ = _archive(
        [
            ("doc-0.pdf", [pdf[i : i + 65536] for i in range(0, len(pdf), 65536)], False),
            ("dir/doc-1.txt", [text], True),
        ]
    )
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.testzip() is None
    assert archive.namelist() == ["doc-0.pdf", "dir/doc-1.txt"]
    assert archive.read("doc-0.pdf") == pdf
    assert archive.read("dir/doc-1.txt") == text
    infos = archive.infolist()
    assert infos[0].compress_type == zipfile.ZIP_STORED
    assert infos[1].compress_type == zipfile.ZIP_DEFLATED
    assert infos[1].compress_size < len(text) // 10


def test_a_large_member_goes_out_in_pieces() -> None:
    """No piece holds the whole member: the archive is sent as it is made."""
    blob = os.urandom(4 << 20)
    data, sizes = _archive(
        [("big.pdf", [blob[i : i + 65536] for i in range(0, len(blob), 65536)], False)]
    )
    assert len(sizes) > 32
    assert max(sizes) < 256 << 10
    assert zipfile.ZipFile(io.BytesIO(data)).read("big.pdf") == blob


@pytest.mark.skipif(shutil.which("unzip") is None, reason="Info-ZIP unzip is not installed")
def test_unzip_accepts_it(tmp_path: Path) -> None:
    data, _ = _archive([("a.txt", [b"hello\n"], True), ("b.hocr", [b"<html/>"], True)])
    path = tmp_path / "out.zip"
    path.write_bytes(data)
    done = subprocess.run(["unzip", "-t", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No errors detected" in done.stdout
