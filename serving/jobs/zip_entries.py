"""A zip's entry count, read from its central directory before `zipfile` builds anything.

`zipfile.ZipFile` turns every central-directory record into a `ZipInfo` (about 500 bytes from
46 on disk) when it opens the archive, so a zip of a million empty entries cost 500 MB before a
limit could be checked. `count_entries` finds the end-of-central-directory record as `zipfile`
does (`_EndRecData`, ZIP64 included) and walks the records' fixed 46-byte headers, seeking over
names, extras and comments, and stops one past the cap: a few reads, whatever the archive holds.
"""

from __future__ import annotations

import struct
from typing import IO

_END = struct.Struct("<4s4H2LH")  # end of central directory; its comment follows
_END_SIGNATURE = b"PK\x05\x06"
_END_SIZE_FIELD = 5  # bytes in the central directory
_MAX_COMMENT = 1 << 16
_LOCATOR = struct.Struct("<4sLQL")  # ZIP64 end-of-central-directory locator
_LOCATOR_SIGNATURE = b"PK\x06\x07"
_END64 = struct.Struct("<4sQ2H2L4Q")  # ZIP64 end of central directory
_END64_SIGNATURE = b"PK\x06\x06"
_END64_SIZE_FIELD = 8
_HEADER = struct.Struct("<4s4B4HL2L5H2L")  # central-directory file header
_HEADER_SIGNATURE = b"PK\x01\x02"
_NAME_EXTRA_COMMENT = slice(12, 15)


def count_entries(f: IO[bytes], at_most: int) -> int:
    """Records in the central directory of the zip open as `f` (seekable), counting at most
    `at_most + 1` of them, so that more than `at_most` is known without reading further.

    A malformed directory counts the records up to where `zipfile` refuses it: opening the
    archive then raises `BadZipFile` at the same point.
    """
    found = _directory(f)
    if found is None:
        return 0
    start, size = found
    f.seek(start)
    count = 0
    walked = 0
    while walked < size and count <= at_most:
        header = f.read(_HEADER.size)
        if len(header) != _HEADER.size or header[:4] != _HEADER_SIGNATURE:
            break
        count += 1
        skip = sum(_HEADER.unpack(header)[_NAME_EXTRA_COMMENT])
        walked += _HEADER.size + skip
        f.seek(skip, 1)
    return count


def _directory(f: IO[bytes]) -> tuple[int, int] | None:
    """(offset, size) of the central directory, located as `zipfile` locates it."""
    file_size = f.seek(0, 2)
    if file_size < _END.size:
        return None
    f.seek(file_size - _END.size)
    tail = f.read()
    if tail[:4] == _END_SIGNATURE and tail[-2:] == b"\0\0":  # no archive comment
        at, record = file_size - _END.size, tail
    else:  # an archive comment (up to 64 KiB) follows the record
        first = max(file_size - _MAX_COMMENT - _END.size, 0)
        f.seek(first)
        data = f.read()
        index = data.rfind(_END_SIGNATURE)
        record = data[index : index + _END.size]
        if index < 0 or len(record) != _END.size:
            return None
        at = first + index
    size: int = _END.unpack(record)[_END_SIZE_FIELD]
    zip64 = _zip64_size(f, at)
    if zip64 is not None:
        size = zip64
        at -= _END64.size + _LOCATOR.size
    start = at - size
    return (start, size) if start >= 0 else None


def _zip64_size(f: IO[bytes], end_at: int) -> int | None:
    """The central directory's size from the ZIP64 records before the end record, if any."""
    locator_at = end_at - _LOCATOR.size
    if locator_at - _END64.size < 0:
        return None
    f.seek(locator_at)
    if f.read(_LOCATOR.size)[:4] != _LOCATOR_SIGNATURE:
        return None
    f.seek(locator_at - _END64.size)
    record = f.read(_END64.size)
    if record[:4] != _END64_SIGNATURE:
        return None
    size: int = _END64.unpack(record)[_END64_SIZE_FIELD]
    return size
