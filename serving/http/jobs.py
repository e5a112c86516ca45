"""HTTP endpoints of batch jobs: submit, status, list, results (streamed NDJSON or text), cancel,
and their documents in the output formats (`job_documents`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar, cast

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from serving.errors import OcrError, StoredQuotaExceeded, UnsupportedMediaType, ValidationFailed
from serving.http.auth import identity_of
from serving.http.body_limit import JOBS, limit_body
from serving.http.endpoints import (
    Handler,
    config_of,
    jobs_of,
    metrics_of,
    ocr_of,
    until_disconnect,
)
from serving.http.exceptions import native_errors
from serving.http.job_documents import (
    OutputRoom,
    archive_response,
    document_response,
    document_states,
    list_body,
    pick,
)
from serving.http.job_hooks import check_outputs, storage_reads, submit_hooks
from serving.http.job_limits import check_free_disk, check_room, stored_limits, upload_bytes
from serving.http.job_results import results_stream
from serving.http.ocr_outputs import parse_mode
from serving.http.open_requests import HeldStream, hold_stream
from serving.http.params import (
    FORMAT_QUERY,
    JOB_FIELDS,
    JOB_QUERY,
    LIST_JOBS_QUERY,
    NO_QUERY,
    RESULTS_QUERY,
    check_names,
    known_query,
)
from serving.http.uploads import FIELD_MAX_BYTES, form_error, gone_mid_upload
from serving.jobs.files import BatchLimits, stage_uploads
from serving.jobs.options import options_from_json, parse_options
from serving.jobs.runner import JobRunner
from serving.jobs.staging import WorkerCounter
from serving.jobs.store.types import STATUSES, JobInfo, JobNotFound
from serving.outputs.formats import negotiate, parse_format
from serving.request_options import NO_CLASSIFIER, parse_flag
from serving.service.requests import JobRequests

T = TypeVar("T")


class JobsDisabled(OcrError):
    """This server serves no jobs."""

    http_status = 404
    code = "jobs_disabled"
    default_message = "Batch jobs are not enabled on this server"


def _runner(request: Request) -> JobRunner:
    runner = jobs_of(request).runner
    if runner is None:
        raise JobsDisabled()
    return runner


async def create_job(request: Request) -> Response:
    """`POST /v1/jobs`: multipart, one or more `file` parts (images, PDFs, zips of them)."""
    runner = _runner(request)
    jobs = jobs_of(request)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "multipart/form-data":
        raise UnsupportedMediaType("Send multipart/form-data with one or more `file` parts")
    await runner.open()
    with jobs.uploads.hold(_client(request)):
        return await _create(request, runner, jobs)


async def _create(request: Request, runner: JobRunner, jobs: JobRequests) -> Response:
    config = jobs.config
    # Refused before the body is read: no upload for nothing.
    owner = _owner(request)
    stored = stored_limits(request, config_of(request))
    need_bytes = upload_bytes(request, config.max_upload_bytes)
    check_free_disk(Path(config.data_dir), need_bytes, config.min_free_disk_bytes)
    await asyncio.to_thread(check_room, runner.store, owner, stored)
    job_id = uuid.uuid4().hex
    limits = BatchLimits(
        max_files=config.max_files_per_job,
        max_pages=config.max_pages_per_job,
        max_bytes=config.max_upload_bytes,
        max_zip_entries=config.max_zip_entries,
    )
    try:
        async with request.form(
            max_files=config.max_files_per_job,
            max_fields=64,
            max_part_size=FIELD_MAX_BYTES,  # `options`; file parts: `body_limit.JOBS`
        ) as form:
            check_names(form.keys(), JOB_FIELDS, "form field")
            raw_options: dict[str, Any] = dict(request.query_params)
            if isinstance(form.get("options"), str):
                raw_options.update(options_from_json(cast(str, form["options"])))
            options = parse_options(raw_options)
            # Refused now, not page by page once the job runs.
            ocr_of(request).options(options, no_classifier=NO_CLASSIFIER)
            uploads = [
                (value.filename or f"file{i}", cast(IO[bytes], value.file))
                for i, (_key, value) in enumerate(form.multi_items())
                if isinstance(value, UploadFile)
            ]
            extras = await submit_hooks(
                form,
                config=config_of(request),
                credentials=jobs.credentials,
                owner=owner,
                uploads=len(uploads),
            )
            uploads += [(item.name, item.stream()) for item in extras.inputs]
            dest = runner.store.job_dir(job_id) / "files"
            count = WorkerCounter(
                jobs.cpu,
                jobs.limits,
                timeout_s=config.staging_timeout_s,
                budget=jobs.budget,
                max_decoded_pixels=config.max_staging_pixels,
            )
            async with storage_reads(extras, jobs.budget, metrics_of(request)):
                staging = asyncio.ensure_future(
                    asyncio.to_thread(stage_uploads, uploads, dest, limits, count)
                )
                try:
                    documents = await until_disconnect(request, _shielded(staging))
                finally:  # the client went away, or the server stops: the thread ends before its
                    if not staging.done():  # files are discarded
                        count.cancel()
                        await asyncio.wait({staging})
                    if not staging.cancelled():
                        staging.exception()  # seen: the client's own hang-up, not logged as lost
            check_outputs(extras.hooks, [document.name for document in documents])
    except HTTPException as err:
        runner.store.discard(job_id)
        raise _form_error(err.detail, config.max_files_per_job) from err
    except ClientDisconnect as err:
        runner.store.discard(job_id)
        raise gone_mid_upload(f"the upload of job {job_id}") from err
    except BaseException:
        runner.store.discard(job_id)
        raise
    # From here the files stay whatever happens: a submit that fails after its row was
    # committed (a commit whose outcome is unknown, a cancellation while its thread commits)
    # leaves a job that needs them. Files of a job never recorded go to the store's orphan sweep.
    try:
        info = await runner.submit(
            job_id, documents, options, owner=owner, limits=stored, hooks=extras.hooks
        )
    except StoredQuotaExceeded:  # nothing was recorded: its files go now
        runner.store.discard(job_id)
        raise
    body = {"id": info.id, "status": info.status, "pages_total": info.pages_total}
    return JSONResponse(body, status_code=202, headers={"Location": f"/v1/jobs/{info.id}"})


async def _shielded(work: asyncio.Future[T]) -> T:
    """`work`, left running when the waiter is cancelled."""
    return await asyncio.shield(work)


def _client(request: Request) -> str:
    """Who `jobs.max_uploads_per_key` counts: the API key, or the client's address when
    authentication is off."""
    identity = identity_of(request)
    if identity is not None:
        return f"key:{identity.id}"
    return f"address:{request.client.host if request.client else ''}"


def _form_error(detail: str, max_files: int) -> OcrError:
    """Starlette's multipart limits (answered as 400) as this API's statuses."""
    if detail.startswith("Too many files"):
        return ValidationFailed(f"More than {max_files} files in one job (jobs.max_files_per_job)")
    return form_error(detail)


def _owner(request: Request) -> str | None:
    """The key id a new job belongs to; None with authentication off."""
    identity = identity_of(request)
    return None if identity is None else identity.id


async def _visible(request: Request, runner: JobRunner, job_id: str) -> JobInfo:
    """The job, when the request's key may see it: its own, or any for an admin or with
    authentication off. Another key's job is not found (404, not 403: its id is not confirmed).

    Raises:
        JobNotFound: no such job, or not this key's.
    """
    info = await runner.get(job_id)
    identity = identity_of(request)
    if identity is not None and not identity.sees(info.owner):
        raise JobNotFound(f"No job {job_id}")
    return info


async def get_job(request: Request) -> Response:
    """`GET /v1/jobs/{id}`: status, counts, timestamps, files and failed pages; with its
    callback or export, their deliveries and every attempt's outcome."""
    runner = _runner(request)
    info = await _visible(request, runner, request.path_params["job_id"])
    body = info.to_json()
    if info.hooks.wanted:
        deliveries = await asyncio.to_thread(runner.store.deliveries, info.id)
        body["deliveries"] = [delivery.to_json() for delivery in deliveries]
    return JSONResponse(body)


async def list_jobs(request: Request) -> Response:
    """`GET /v1/jobs`: jobs newest first; `?status=` filters, `?limit=` caps (default 100)."""
    status = request.query_params.get("status")
    if status is not None and status not in STATUSES:
        raise ValidationFailed(f"status must be one of {', '.join(STATUSES)}")
    limit_text = request.query_params.get("limit", "100")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= 1000:
        raise ValidationFailed("limit must be an integer in 1..1000")
    identity = identity_of(request)
    owner = None if identity is None or identity.role == "admin" else identity.id
    jobs = await _runner(request).list(status=status, limit=int(limit_text), owner=owner)
    return JSONResponse({"jobs": [info.to_json(detail=False) for info in jobs]})


async def cancel_job(request: Request) -> Response:
    """`POST /v1/jobs/{id}/cancel`: stop a job and keep what it finished."""
    runner = _runner(request)
    await _visible(request, runner, request.path_params["job_id"])
    info = await runner.cancel(request.path_params["job_id"])
    return JSONResponse(info.to_json())


async def delete_job(request: Request) -> Response:
    """`DELETE /v1/jobs/{id}`: cancel the job and delete it with its files and results."""
    job_id = request.path_params["job_id"]
    runner = _runner(request)
    await _visible(request, runner, job_id)
    await runner.delete(job_id)
    return JSONResponse({"id": job_id, "deleted": True})


async def job_results(request: Request) -> Response:
    """`GET /v1/jobs/{id}/results`: NDJSON, one line per finished page as pages finish, following
    the job until it ends (`?follow=false`: what is finished now), for `jobs.follow_max_s` at
    most: `?after=N` (the lines got so far) goes on from there. `?format=text`: plain text in
    document order, pages ended by a form feed (`?after=N`: the pages got so far)."""
    runner = _runner(request)
    job_id = request.path_params["job_id"]
    await _visible(request, runner, job_id)  # 404 before the stream starts
    follow = parse_flag("follow", request.query_params.get("follow", "true"))
    fmt = request.query_params.get("format", "ndjson")
    jobs = jobs_of(request)
    stream, media_type = results_stream(
        runner,
        job_id,
        follow=follow,
        fmt=fmt,
        after=request.query_params.get("after", "0"),
        follow_max_s=jobs.config.follow_max_s,
    )
    if not follow:
        return StreamingResponse(stream, media_type=media_type)
    release = hold_stream(request, jobs.streams)  # 429 past auth.max_open_streams
    return HeldStream(stream, media_type=media_type, release=release)


async def list_documents(request: Request) -> Response:
    """`GET /v1/jobs/{id}/documents`: each uploaded document with its pages and status."""
    runner = _runner(request)
    info = await _visible(request, runner, request.path_params["job_id"])
    return JSONResponse(list_body(info, await document_states(runner.store, info)))


async def get_document(request: Request) -> Response:
    """`GET /v1/jobs/{id}/documents/{n}`: one document in `?format=` (or as `Accept` asks):
    json, text, hocr, alto or pdf (`?mode=`, `?deskew=`: as `/v1/ocr`'s); 409 while its pages
    are still to run."""
    runner = _runner(request)
    info = await _visible(request, runner, request.path_params["job_id"])
    fmt = negotiate(request.query_params.get("format"), request.headers.get("accept"))
    mode = parse_mode(request.query_params.get("mode", "skip"))
    deskew = parse_flag("deskew", request.query_params.get("deskew", "false"))
    state = pick(await document_states(runner.store, info), request.path_params["index"])
    room = _output_room(request, info)
    return await document_response(jobs_of(request), runner, info, state, fmt, mode, deskew, room)


async def job_archive(request: Request) -> Response:
    """`GET /v1/jobs/{id}/archive?format=`: a zip of every document in that format (default
    json), streamed; 409 until the job has ended."""
    runner = _runner(request)
    info = await _visible(request, runner, request.path_params["job_id"])
    fmt = parse_format(request.query_params.get("format", "json"))
    mode = parse_mode(request.query_params.get("mode", "skip"))
    deskew = parse_flag("deskew", request.query_params.get("deskew", "false"))
    states = await document_states(runner.store, info)
    return archive_response(
        jobs_of(request), runner, info, states, fmt, mode, deskew, _output_room(request, info)
    )


def _output_room(request: Request, info: JobInfo) -> OutputRoom:
    """What a rendered output of `info`'s counts against: its owner's stored bytes, under the
    asking key's limits, and `jobs.data_dir`'s free disk."""
    config = jobs_of(request).config
    return OutputRoom(
        owner=info.owner,
        limits=stored_limits(request, config_of(request)),
        data_dir=Path(config.data_dir),
        min_free_disk_bytes=config.min_free_disk_bytes,
    )


def job_routes(observe: Callable[[str, Handler], Handler]) -> list[Route]:
    """The jobs API's routes, each wrapped by `observe(endpoint, handler)` (metrics)."""

    def route(path: str, handler: Handler, method: str, query: tuple[str, ...]) -> Route:
        return Route(
            path, observe(path, native_errors(known_query(query, handler))), methods=[method]
        )

    return [
        Route(  # the body's limit outside the errors: it closes after an early answer
            "/v1/jobs",
            observe(
                "/v1/jobs", limit_body(JOBS, native_errors(known_query(JOB_QUERY, create_job)))
            ),
            methods=["POST"],
        ),
        route("/v1/jobs", list_jobs, "GET", LIST_JOBS_QUERY),
        route("/v1/jobs/{job_id}", get_job, "GET", NO_QUERY),
        route("/v1/jobs/{job_id}", delete_job, "DELETE", NO_QUERY),
        route("/v1/jobs/{job_id}/results", job_results, "GET", RESULTS_QUERY),
        route("/v1/jobs/{job_id}/documents", list_documents, "GET", NO_QUERY),
        route("/v1/jobs/{job_id}/documents/{index}", get_document, "GET", FORMAT_QUERY),
        route("/v1/jobs/{job_id}/archive", job_archive, "GET", FORMAT_QUERY),
        route("/v1/jobs/{job_id}/cancel", cancel_job, "POST", NO_QUERY),
    ]
