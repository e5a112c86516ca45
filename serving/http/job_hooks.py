"""A submit's hooks and object-storage inputs: the `POST /v1/jobs` form fields that ask for a
signed callback, an export of the results, or documents read from object storage
(`serving.jobs.hooks`, `serving.jobs.storage`), checked before any byte is staged."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from starlette.datastructures import FormData

from serving.config import AppConfig
from serving.errors import OcrError, ValidationFailed
from serving.http.job_limits import check_free_disk
from serving.jobs.credentials import Credentials, CredentialStore
from serving.jobs.destinations import connect_target
from serving.jobs.hooks import FIELDS, JobHooks, check_output_names, exported_names, parse_hooks
from serving.jobs.outbox import callback_policy
from serving.jobs.storage.inputs import InputObject, presigned_policy, resolve_inputs, s3_client
from serving.jobs.storage.s3 import TRANSFER_BYTES
from serving.metrics import Metrics
from serving.scheduling.memory_budget import MemoryBudget


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitHooks:
    """What a submit asked for besides its uploaded files."""

    hooks: JobHooks
    inputs: list[InputObject]
    """Documents to read from object storage, after the uploaded ones."""


async def submit_hooks(
    form: FormData,
    *,
    config: AppConfig,
    credentials: CredentialStore | None,
    owner: str | None,
    uploads: int,
) -> SubmitHooks:
    """The hooks and inputs the form's fields ask for, checked: hosts allowed and resolving
    to allowed addresses, a signing secret and S3 credentials configured for the key, the
    inputs listed within the job's limits (`uploads` files were sent besides).

    Raises:
        ValidationFailed, DestinationRefused: a field, URL or host not allowed (422).
        StorageNotConfigured, StorageDenied, StorageNotFound: the key cannot use the store as
            asked (422); StorageUnavailable: the store could not be reached (502).
        PayloadTooLarge: the listed inputs are over `jobs.max_upload_bytes`.
        InsufficientStorage: the disk would not keep `jobs.min_free_disk_bytes` with them (507).
    """
    fields = {name: _texts(form.getlist(name)) for name in FIELDS}
    hooks = parse_hooks(
        fields, callbacks=callback_policy(config), presigned=presigned_policy(config.storage)
    )
    keys = credentials.for_owner(owner) if credentials is not None else Credentials()
    if hooks.callback_url is not None:
        if keys.webhook_secret is None:
            raise ValidationFailed(
                "callback_url: no signing secret is configured for this key (webhook_secret in "
                "its [[keys]] entry of auth.keys_file, or webhooks.secret_file)"
            )
        await connect_target(hooks.callback_url, callback_policy(config), "callback_url")
    if hooks.output is not None:
        s3_client(keys, config.storage)  # refused now when the key has no S3 credentials
    inputs = await resolve_inputs(
        fields["input"],
        credentials=keys,
        storage=config.storage,
        max_objects=config.jobs.max_files_per_job - uploads,
        max_bytes=config.jobs.max_upload_bytes,
    )
    listed = sum(item.size or 0 for item in inputs)
    if listed:  # the objects as listed, before a byte is read (the body's size was checked)
        check_free_disk(Path(config.jobs.data_dir), listed, config.jobs.min_free_disk_bytes)
    if not uploads and not inputs:
        raise ValidationFailed(
            "Send one or more files in multipart fields named `file`, or name them in `input` "
            "fields (s3://bucket/key, s3://bucket/prefix/, presigned URLs)"
        )
    return SubmitHooks(hooks=hooks, inputs=inputs)


def check_outputs(hooks: JobHooks, documents: Sequence[str]) -> None:
    """Refuse `output_urls` naming outputs the staged documents do not make.

    Raises:
        ValidationFailed: naming them.
    """
    if hooks.output_urls:
        check_output_names(hooks, exported_names(hooks, documents))


@contextlib.asynccontextmanager
async def storage_reads(
    submit: SubmitHooks, budget: MemoryBudget, metrics: Metrics
) -> AsyncIterator[None]:
    """While a submit stages its documents: the buffer its objects from storage are streamed
    through held in the memory budget, and the objects counted (`ocr_storage_objects_total`):
    all read, or one failed (the submit stops at the first)."""
    if not submit.inputs:
        yield
        return
    try:
        async with budget.hold(TRANSFER_BYTES):
            yield
    except OcrError as err:
        if err.code.startswith("storage_"):
            metrics.storage_objects.labels(direction="read", outcome="failed").inc()
        raise
    metrics.storage_objects.labels(direction="read", outcome="ok").inc(len(submit.inputs))


def _texts(values: Sequence[object]) -> list[str]:
    """A form field's text values (a file sent under a text field's name is refused)."""
    texts = []
    for value in values:
        if not isinstance(value, str):
            raise ValidationFailed("The hooks' and inputs' fields are text, not files")
        texts.append(value)
    return texts
