"""Zip entries are counted from the central directory, as zipfile reads it, before unpacking."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import IO

import pytest

from serving.decode.documents import stage_document
from serving.decode.readers import DecodeLimits, FileKind
from serving.errors import ValidationFailed
from serving.jobs.files import BatchLimits, stage_uploads
from serving.jobs.zip_entries import count_entries
from tests import images

LIMITS = BatchLimits(max_files=4, max_pages=10, max_bytes=10_000_000, max_zip_entries=50)
DECODE = DecodeLimits(max_pdf_pages=10, pdf_render_scale=1.0, max_image_pixels=10**7)


def _count(path: Path, kind: FileKind) -> int:
    """What the server's CPU worker runs, here in process."""
    return stage_document(str(path), kind, DECODE)


def _zip(names: list[str], *, comment: bytes = b"", prefix: bytes = b"") -> bytes:
    buf = io.BytesIO()
    buf.write(prefix)
    with zipfile.ZipFile(buf, "w") as archive:
        for name in names:
            info = zipfile.ZipInfo(name)
            info.comment = b"c" * (len(name) % 3)
            archive.writestr(info, b"" if name.endswith("/") else b"x")
        archive.comment = comment
    return buf.getvalue()


def _dot_entries(count: int) -> list[str]:
    return [f".hidden{i}" for i in range(count)]


class _CountingReads(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self.bytes_read += len(chunk)
        return chunk


def _stage(data: bytes, tmp_path: Path, limits: BatchLimits = LIMITS) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as info:
        stage_uploads([("pack.zip", io.BytesIO(data))], tmp_path / "files", limits, _count)
    return info.value


# --- counting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        _zip([]),
        _zip(["a.png"]),
        _zip(["dir/", "dir/a.png", "__MACOSX/", "__MACOSX/dir/._a.png", *_dot_entries(30)]),
        _zip(_dot_entries(7), comment=b"an archive comment" * 100),
        _zip(_dot_entries(7), prefix=b"#!/bin/sh\nexit 0\n" * 10),  # self-extracting style
    ],
    ids=["empty", "one", "mixed", "comment", "prefixed"],
)
def test_count_equals_what_zipfile_reads(data: bytes) -> None:
    expected = len(zipfile.ZipFile(io.BytesIO(data)).infolist())
    assert count_entries(io.BytesIO(data), at_most=1000) == expected


def test_zip64_end_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)  # more entries: ZIP64 end records
    data = _zip(_dot_entries(9))
    assert b"PK\x06\x06" in data[-200:]
    assert count_entries(io.BytesIO(data), at_most=1000) == 9


def test_stops_one_past_the_cap_reading_only_that_far() -> None:
    data = _zip(_dot_entries(5000))
    f = _CountingReads(data)
    assert count_entries(f, at_most=10) == 11
    # The end record, then 11 headers and nothing of the other 4989 (about 250 KB on disk).
    assert f.bytes_read < 2_000


def test_not_a_zip_counts_nothing() -> None:
    assert count_entries(io.BytesIO(b"PK\x05\x06"), at_most=10) == 0
    assert count_entries(io.BytesIO(b"%PDF-1.7\n" * 20), at_most=10) == 0


# --- the job's limit ----------------------------------------------------------------------


def test_dot_entries_over_the_limit_are_refused_before_zipfile_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Skipped entries (dotfiles, folders, __MACOSX/) were never counted: a zip of a million of
    # them cost 500 MB of ZipInfo objects in the main process, then staged nothing.
    data = _zip(_dot_entries(LIMITS.max_zip_entries + 1))

    def no_zipfile(*args: object, **kwargs: object) -> zipfile.ZipFile:
        raise AssertionError("the central directory was read into ZipInfo objects")

    monkeypatch.setattr(zipfile, "ZipFile", no_zipfile)
    err = _stage(data, tmp_path)
    assert err.http_status == 422
    assert "jobs.max_zip_entries" in err.message
    assert "pack.zip" in err.message


def test_folders_and_macos_metadata_count(tmp_path: Path) -> None:
    names = ["scans/", "__MACOSX/", "__MACOSX/scans/"]
    names += [f"__MACOSX/scans/._{i}.png" for i in range(LIMITS.max_zip_entries - 2)]
    assert "jobs.max_zip_entries" in _stage(_zip(names), tmp_path).message


def test_entries_count_across_the_jobs_zips(tmp_path: Path) -> None:
    half = _zip(_dot_entries(LIMITS.max_zip_entries // 2 + 1))
    uploads: list[tuple[str, IO[bytes]]] = [
        ("a.zip", io.BytesIO(half)),
        ("b.zip", io.BytesIO(half)),
    ]
    with pytest.raises(ValidationFailed, match=r"b\.zip.*jobs\.max_zip_entries"):
        stage_uploads(uploads, tmp_path / "files", LIMITS, _count)


def test_an_end_record_that_undercounts_does_not_hide_entries(tmp_path: Path) -> None:
    data = bytearray(_zip(_dot_entries(LIMITS.max_zip_entries + 1)))
    end = data.rindex(b"PK\x05\x06")
    data[end + 8 : end + 12] = b"\x01\x00\x01\x00"  # entries on this disk, in total: 1
    assert "jobs.max_zip_entries" in _stage(bytes(data), tmp_path).message


def test_a_zip_within_the_limit_is_unpacked(tmp_path: Path) -> None:
    # Six entries, one document: skipped entries count against jobs.max_zip_entries only.
    png = images.encode_png(images.latin_lines().image)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("scans/", b"")
        archive.writestr("__MACOSX/scans/._page.png", b"metadata")
        archive.writestr("scans/.DS_Store", b"metadata")
        archive.writestr("__MACOSX/", b"")
        archive.writestr("__MACOSX/scans/", b"")
        archive.writestr("scans/page.png", png)
    buf.seek(0)
    (document,) = stage_uploads([("pack.zip", buf)], tmp_path / "files", LIMITS, _count)
    assert document.name == "pack.zip/scans/page.png"


def test_backslash_names_are_folders_as_slashes_are(tmp_path: Path) -> None:
    # Windows tools write `scans\\page.png`; zipfile keeps the backslash on Linux, and its
    # folders, dot-files and macOS metadata were then staged as documents (issue 37, item 13).
    page = images.encode_png(images.latin_lines().image)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr(zipfile.ZipInfo("scans\\"), b"")
        archive.writestr(zipfile.ZipInfo("scans\\page.png"), page)
        archive.writestr(zipfile.ZipInfo("scans\\.page.png"), page)
        archive.writestr(zipfile.ZipInfo("__MACOSX\\scans\\._page.png"), page)
    documents = stage_uploads(
        [("pack.zip", io.BytesIO(buf.getvalue()))], tmp_path / "files", LIMITS, _count
    )
    assert [d.name for d in documents] == ["pack.zip/scans/page.png"]
