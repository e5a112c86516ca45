"""A batch job's documents in the output formats: the list, one document, and a zip of them all.

A document is rendered once per format by a CPU worker, from its stored page records and its
original upload, into `job_dir/outputs/` (deleted with the job), then sent from that file; the
archive streams each document's file into a zip as it goes (`ZipStream`), so neither the main
process nor the archive holds a document whole. Rendering holds the memory budget for what the
worker will hold (`RENDER_COPIES`; a PDF of an image, its frames as sent, sized from the upload's
headers, not the OCR pages) and runs at background priority, behind interactive work.

A document is ready once none of its pages is still to run: every page done, or the job ended
(failed or cancelled) with some pages failed or never run, which come out without text (their
errors are in the JSON format and in `GET /v1/jobs/{id}`). Asked for earlier, it answers 409;
the archive answers 409 until the whole job has ended.

A rendered output stays on disk with its job (`outputs/{i}[.force|.redo].{ext}`): it counts
against its owner's stored bytes (`auth.max_stored_bytes`, with the uploads) and is written only
when `jobs.data_dir`'s disk keeps `jobs.min_free_disk_bytes` free after it (`OutputRoom`).
Before, outputs escaped both: a key could fill the disk rendering each document in every format
and mode (issue 49, item 8).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from starlette.responses import FileResponse, Response, StreamingResponse

from serving.errors import OcrError, PayloadTooLarge, StoredQuotaExceeded
from serving.http.job_limits import check_free_disk
from serving.http.zip_stream import ZipStream
from serving.jobs.document_files import (
    SOURCE_BYTES_PER_PX,
    StoredDocument,
    source_pixels,
    write_stored,
)
from serving.jobs.runner import JobRunner
from serving.jobs.store import JobStore
from serving.jobs.store.types import FileInfo, FinishedPage, JobInfo, StoredLimits
from serving.outputs.document import TextMode
from serving.outputs.formats import EXTENSIONS, MEDIA_TYPES, Format
from serving.scheduling.priorities import BACKGROUND
from serving.service.requests import JobRequests

DocumentStatus = Literal["pending", "succeeded", "failed", "incomplete"]
"""pending: pages still to run; succeeded: every page done; failed: every page ended and some
failed; incomplete: the job was cancelled before some pages ran (they have no text)."""

CHUNK_BYTES = 1 << 20
"""A rendered file is sent in pieces of this size."""
RENDER_COPIES = 4
"""What rendering holds, in multiples of the document's records: parsed JSON, the document
objects, the output (hOCR's markup is the largest); a PDF also holds its upload three times (read,
parsed by pikepdf, written: as `serving.outputs.service.render_cost` counts) and a frame decoded."""


OUTPUT_RECORD_COPIES = 3
"""What an output may take on disk, in multiples of the document's page records (hOCR's
markup, the largest, is under three; text is less than one), plus, for a PDF, its upload
twice (the embedded image or the PDF's own pages, and what the text layer adds)."""


@dataclass(frozen=True, slots=True)
class OutputRoom:
    """Whose stored bytes a rendered output counts against (the job's owner), under which
    limits (the asking key's), and the disk it must leave room on."""

    owner: str | None
    limits: StoredLimits
    data_dir: Path
    min_free_disk_bytes: int


class DocumentNotFound(OcrError):
    """The job has no document with this index."""

    http_status = 404
    code = "document_not_found"
    default_message = "No such document in this job"


class NotReady(OcrError):
    """A document (or the archive) asked for while pages are still to run."""

    http_status = 409
    code = "not_ready"
    default_message = "Pages of this job are still to run"


@dataclass(frozen=True, slots=True, kw_only=True)
class DocumentState:
    """One document of a job and how far it got."""

    file: FileInfo
    first_seq: int
    """The job-wide sequence number of its first page."""
    done: int
    failed: int
    status: DocumentStatus

    def to_json(self, job_id: str) -> dict[str, Any]:
        """Its entry in `GET /v1/jobs/{id}/documents`."""
        return {
            "index": self.file.index,
            "name": self.file.name,
            "kind": self.file.kind,
            "pages": self.file.pages,
            "pages_done": self.done,
            "pages_failed": self.failed,
            "status": self.status,
            "href": f"/v1/jobs/{job_id}/documents/{self.file.index}",
        }


async def document_states(store: JobStore, info: JobInfo) -> list[DocumentState]:
    """Every document of the job, with its pages done and failed."""
    _, finished = await asyncio.to_thread(store.finished_pages, info.id)
    done = [0] * len(info.files)
    failed = [0] * len(info.files)
    for page in finished:
        (failed if page.error is not None else done)[page.file_index] += 1
    states, seq = [], 0
    for file in info.files:
        n_done, n_failed = done[file.index], failed[file.index]
        status: DocumentStatus
        if n_done == file.pages:
            status = "succeeded"
        elif not info.finished and n_done + n_failed < file.pages:
            status = "pending"
        elif n_done + n_failed == file.pages:
            status = "failed"
        else:
            status = "incomplete"
        states.append(
            DocumentState(file=file, first_seq=seq, done=n_done, failed=n_failed, status=status)
        )
        seq += file.pages
    return states


def list_body(info: JobInfo, states: list[DocumentState]) -> dict[str, Any]:
    """The `GET /v1/jobs/{id}/documents` body."""
    return {
        "id": info.id,
        "status": info.status,
        "documents": [state.to_json(info.id) for state in states],
    }


def pick(states: list[DocumentState], index_text: str) -> DocumentState:
    """The document `index_text` names.

    Raises:
        DocumentNotFound: not an index of this job's documents.
    """
    if not index_text.isdigit() or int(index_text) >= len(states):
        raise DocumentNotFound(f"No document {index_text} in this job (0..{len(states) - 1})")
    return states[int(index_text)]


async def document_response(
    jobs: JobRequests,
    runner: JobRunner,
    info: JobInfo,
    state: DocumentState,
    fmt: Format,
    mode: TextMode = "skip",
    deskew: bool = False,
    room: OutputRoom | None = None,
) -> Response:
    """One document in `fmt`, as a download.

    Raises:
        NotReady: pages of the document are still to run (409).
        PayloadTooLarge: rendering it could never fit in the memory budget (413).
        StoredQuotaExceeded: its output would take `room.owner` past its stored bytes (429).
        InsufficientStorage: its output would leave too little free disk (507).
    """
    if state.status == "pending":
        raise NotReady(
            f"Document {state.file.index} ({state.file.name}) has {state.done + state.failed} of "
            f"{state.file.pages} pages finished; ask again when `GET /v1/jobs/{info.id}/documents` "
            "says it is not pending"
        )
    path = await rendered(jobs, runner, info.id, state, fmt, mode, deskew, room)
    return FileResponse(
        path,
        media_type=_content_type(fmt),
        filename=download_name(state.file, fmt),
        content_disposition_type="attachment",
    )


def archive_response(
    jobs: JobRequests,
    runner: JobRunner,
    info: JobInfo,
    states: list[DocumentState],
    fmt: Format,
    mode: TextMode = "skip",
    deskew: bool = False,
    room: OutputRoom | None = None,
) -> Response:
    """Every document of the finished job in `fmt`, as one zip streamed as it is made.

    Raises:
        NotReady: the job has not ended (409).
    """
    if not info.finished:
        raise NotReady(
            f"Job {info.id} is {info.status} ({info.pages_done + info.pages_failed} of "
            f"{info.pages_total} pages finished); its archive is made once it ends"
        )
    return StreamingResponse(
        _archive(jobs, runner, info.id, states, fmt, mode, deskew, room),
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="job-{info.id}-{fmt}.zip"'},
    )


async def _archive(
    jobs: JobRequests,
    runner: JobRunner,
    job_id: str,
    states: list[DocumentState],
    fmt: Format,
    mode: TextMode,
    deskew: bool,
    room: OutputRoom | None,
) -> AsyncIterator[bytes]:
    stream = ZipStream()
    names: set[str] = set()
    for state in states:
        name = _member_name(state.file, fmt, names)
        try:
            path = await rendered(jobs, runner, job_id, state, fmt, mode, deskew, room)
        except OcrError as err:  # one document's failure is reported in the archive, not fatal
            error = {"code": err.code, "message": err.message}
            body = json.dumps({"name": state.file.name, "error": error}).encode()
            for data in stream.member(f"{name}.error.json", [body]):
                yield data
            continue
        parts = stream.member(name, _file_chunks(path), compress=fmt != "pdf")
        while (piece := await asyncio.to_thread(next, parts, None)) is not None:
            yield piece
    yield stream.close()


def _file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            yield chunk


async def rendered(
    jobs: JobRequests,
    runner: JobRunner,
    job_id: str,
    state: DocumentState,
    fmt: Format,
    mode: TextMode = "skip",
    deskew: bool = False,
    room: OutputRoom | None = None,
) -> Path:
    """The document's file in `fmt` (a PDF from a PDF: in `mode`; a PDF straightened with
    `deskew`), rendered by a CPU worker unless it was already, within `room` (its owner's stored
    bytes and the free disk).

    Raises:
        PayloadTooLarge: rendering it could never fit in the memory budget.
        StoredQuotaExceeded: the output would take `room.owner` past its stored bytes (429).
        InsufficientStorage: the output would leave less than `room.min_free_disk_bytes` free
            on `room.data_dir`'s disk (507).
        JobNotFound: the job was deleted meanwhile.
    """
    outputs = runner.store.job_dir(job_id) / "outputs"
    moded = f".{mode}" if fmt == "pdf" and mode != "skip" else ""
    moded += ".deskew" if fmt == "pdf" and deskew else ""
    path = outputs / f"{state.file.index}{moded}.{EXTENSIONS[fmt]}"
    if await asyncio.to_thread(path.exists):
        return path
    records = outputs / f".{state.file.index}.{fmt}.{uuid.uuid4().hex}.records.jsonl"
    records_bytes, largest_px = await asyncio.to_thread(
        _write_records, runner, job_id, state, records
    )
    source = runner.store.job_dir(job_id) / "files" / state.file.stored_as
    try:
        cost = RENDER_COPIES * records_bytes + (1 << 20)
        if fmt == "pdf":  # the upload read and parsed, a frame decoded where it is re-encoded
            sent_px = 0
            if state.file.stored_as and state.file.kind == "image":
                # The image's frame as sent, not the OCR page (scaled to `max_page_side_px`).
                sent_px = await jobs.cpu.run(
                    source_pixels,
                    str(source),
                    state.file.kind,
                    state.file.pages,
                    jobs.limits,
                    priority=BACKGROUND,
                )
            cost += 3 * state.file.size_bytes + max(4 * largest_px, SOURCE_BYTES_PER_PX * sent_px)
        if room is not None:
            pdf_source = 2 * state.file.size_bytes if fmt == "pdf" else 0
            need = OUTPUT_RECORD_COPIES * records_bytes + pdf_source + (64 << 10)
            await asyncio.to_thread(_check_room, runner.store, room, need)
        budget = jobs.budget
        if cost > budget.total_bytes:
            raise PayloadTooLarge(
                f"Rendering document {state.file.index} as {fmt} needs about {cost >> 20} MiB; "
                f"pages may take {budget.total_bytes >> 20} MiB of this server's memory budget "
                "(server.memory_budget_bytes)"
            )
        task = StoredDocument(
            name=state.file.name,
            kind=state.file.kind,
            pages=state.file.pages,
            source=str(source) if state.file.stored_as else None,
            records=str(records),
            dest=str(path),
            fmt=fmt,
            limits=jobs.limits,
            mode=mode,
            deskew=deskew,
        )
        async with budget.hold(cost):
            await jobs.cpu.run(write_stored, task, priority=BACKGROUND)
    finally:
        await asyncio.to_thread(records.unlink, missing_ok=True)
    return path


def _check_room(store: JobStore, room: OutputRoom, need_bytes: int) -> None:
    """Refuse an output of about `need_bytes` that would take its owner past its stored bytes
    (uploads and outputs) or leave too little free disk.

    Raises:
        InsufficientStorage: see `rendered` (507).
        StoredQuotaExceeded: see `rendered` (429).
    """
    check_free_disk(room.data_dir, need_bytes, room.min_free_disk_bytes, spool=False)
    limit = room.limits.max_bytes
    if not limit:
        return
    held = store.usage(room.owner).bytes
    if held + need_bytes > limit:
        who = "jobs submitted without a key" if room.owner is None else f"key {room.owner}"
        raise StoredQuotaExceeded(
            f"The store holds {held} bytes of {who}, rendered outputs included; this output "
            f"would add about {need_bytes} and the limit is {limit} (max_stored_bytes): delete "
            "finished jobs (DELETE /v1/jobs/{id}) or wait for them to expire"
        )


def _write_records(
    runner: JobRunner, job_id: str, state: DocumentState, path: Path
) -> tuple[int, int]:
    """The document's page records, one JSON line per page (`null` when none), into `path`;
    returns the bytes written and the largest page's pixels."""
    _, finished = runner.store.finished_pages(job_id)
    mine: dict[int, FinishedPage] = {
        p.page: p for p in finished if p.file_index == state.file.index
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    size = largest_px = 0
    with path.open("wb") as file:
        for page in range(state.file.pages):
            entry = mine.get(page)
            if entry is None:
                line = b"null"
            elif entry.error is not None:
                line = json.dumps(entry.error.to_json(), ensure_ascii=False).encode()
            else:
                line = runner.store.read_result(job_id, entry.seq)
                record = json.loads(line)
                largest_px = max(largest_px, int(record["width"]) * int(record["height"]))
            file.write(line + b"\n")
            size += len(line) + 1
    return size, largest_px


def download_name(file: FileInfo, fmt: Format) -> str:
    """The file name a document downloads as: its own, less a directory, with the format's
    extension added (`scan.png.pdf`, `report.pdf.hocr`)."""
    return f"{PurePosixPath(file.name).name or 'document'}.{EXTENSIONS[fmt]}"


def _member_name(file: FileInfo, fmt: Format, taken: set[str]) -> str:
    """The document's path in the archive: its name (folders of an uploaded zip kept, no `..`)
    with the format's extension; its index in front when another document has the same name."""
    parts = [p for p in PurePosixPath(file.name).parts if p not in ("/", "..", ".")]
    name = f"{'/'.join(parts) or 'document'}.{EXTENSIONS[fmt]}"
    if name in taken:
        name = f"{file.index}-{name}"
    taken.add(name)
    return name


def _content_type(fmt: Format) -> str:
    """`MEDIA_TYPES[fmt]`, which names the text formats' charset once (this added a second)."""
    return MEDIA_TYPES[fmt]
