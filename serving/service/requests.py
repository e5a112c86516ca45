"""The narrow services the HTTP handlers are given, each what one kind of endpoint uses: the OCR
endpoints run a document with `OcrRequests` and render a document answer with `Renderer`,
`/readyz` reads a `Readiness`, and the jobs' endpoints use `JobRequests`. `serving.app.build_app`
puts them in the app's state (`EndpointServices`), and each handler takes only the one it uses
(`serving.http.endpoints`), so none reaches through the runtime's parts."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Counter

from models.bundle import ModelBundle
from pipelines.types import PageResult
from serving.config import AppConfig, AuthConfig, JobsConfig, PipelineConfig
from serving.decode.readers import DecodeLimits, FileKind
from serving.jobs.credentials import CredentialStore
from serving.jobs.runner import JobRunner
from serving.jobs.staging import UploadSlots
from serving.metrics import Metrics
from serving.model_sets import ModelSets
from serving.outputs.document import Document, reading_orders
from serving.outputs.formats import Format
from serving.outputs.service import OutputStream, render_document
from serving.request_options import OcrOptions, request_options
from serving.scheduling.batch_shapes import BatchShapes
from serving.scheduling.memory_budget import Held, MemoryBudget
from serving.scheduling.quotas import ClientSlots, Tenant
from serving.service.ocr import OcrService, PageOutput
from serving.workers.cpu_pool import CpuPool


class Readiness(Protocol):
    """What `/readyz` reads: whether the server is ready, and the state of every part."""

    @property
    def ready(self) -> bool: ...

    def describe(self) -> dict[str, Any]: ...

    def describe_models(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class OcrRequests:
    """What the OCR endpoints (`/ocr`, `/v1/ocr`, `/v1/render`) use: the start-up check, a
    request's options over the served models, the OCR of its document (its pages counted in
    `ocr_pages_total`) and a page rendered as the pipeline sees it."""

    check_ready: Callable[[], None]
    """Raises NotReady (503) until start-up has finished (`Runtime.check_ready`)."""
    bundle: ModelBundle
    pipeline: PipelineConfig
    service: OcrService
    pages: Counter
    sets: ModelSets | None = None
    """Every model set served; a request's `lang` or `model` picks one (None: `bundle`)."""
    shapes: BatchShapes | None = None
    """The batch shapes a request's inputs are padded to (`[engine] batching`); None: exact."""

    def options(self, overrides: Mapping[str, Any], *, no_classifier: str) -> OcrOptions:
        """A request's options over the served models and the config's pipeline defaults.

        Raises:
            ValidationFailed: the request asks for the classifier and none is configured (the
                API's `no_classifier` message), or an override is out of range.
        """
        return request_options(
            self.bundle,
            self.pipeline,
            overrides,
            no_classifier=no_classifier,
            sets=self.sets,
            shapes=self.shapes,
        )

    async def ocr(
        self,
        data: bytes,
        kind: FileKind,
        options: OcrOptions,
        *,
        timeout_s: float,
        tenant: Tenant | None,
        visualize: bool = False,
    ) -> list[PageOutput]:
        """OCR every page of the document (`OcrService.ocr`), and count them once answered."""
        pages = await self.service.ocr(
            data, kind, options, visualize=visualize, timeout_s=timeout_s, tenant=tenant
        )
        self.pages.inc(len(pages))
        return pages

    async def render_page(
        self, data: bytes, kind: FileKind, index: int, *, timeout_s: float, tenant: Tenant | None
    ) -> tuple[bytes, Held]:
        """Page `index` of the document as PNG, and its charge (`OcrService.render_page`)."""
        return await self.service.render_page(data, kind, index, timeout_s=timeout_s, tenant=tenant)


@dataclass(frozen=True, slots=True)
class Renderer:
    """Renders a document answer (text, hOCR, ALTO, PDF) in a CPU worker, its bytes charged to
    the memory budget while they are streamed (`serving.outputs.service`)."""

    cpu: CpuPool
    budget: MemoryBudget

    async def render(self, document: Document, fmt: Format, *, source_bytes: int) -> OutputStream:
        """The rendered document, to stream."""
        return await render_document(
            self.cpu, self.budget, document, fmt, source_bytes=source_bytes
        )

    async def reading_orders(self, results: Sequence[PageResult]) -> list[list[list[int]]]:
        """Each page's blocks in reading order, found in a CPU worker: the XY-cut is per-page
        CPU work, kept off the event loop (`serving.outputs.document.reading_orders`)."""
        if not any(result.lines for result in results):
            return [[] for _ in results]
        orders: list[list[list[int]]] = await self.cpu.run(reading_orders, list(results))
        return orders


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRequests:
    """What the jobs' endpoints use besides `OcrRequests.options`: the runner (None where the
    server serves no jobs), the jobs' settings, and the CPU pool, decode limits and memory budget
    an upload's pages are counted and a document's answer rendered with."""

    runner: JobRunner | None
    config: JobsConfig
    cpu: CpuPool
    limits: DecodeLimits
    budget: MemoryBudget
    uploads: UploadSlots = field(
        default_factory=lambda: UploadSlots(JobsConfig().max_uploads_per_key)
    )
    """Uploads each client has being received and staged (`jobs.max_uploads_per_key`)."""
    credentials: CredentialStore | None = None
    """Each key's webhook secret and S3 credentials (`serving.jobs.credentials`); None: none
    configured, so callbacks and `s3://` are refused."""
    streams: ClientSlots = field(
        default_factory=lambda: ClientSlots(
            AuthConfig().max_open_streams, setting="auth.max_open_streams", what="results streams"
        )
    )
    """Results streams each client has following a job (`auth.max_open_streams`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointServices:
    """What the HTTP endpoints are given, built by `Runtime.endpoint_services`."""

    config: AppConfig
    metrics: Metrics
    budget: MemoryBudget
    """What request bodies are charged to while they arrive (`serving.http.body_limit`)."""
    readiness: Readiness
    ocr: OcrRequests
    renderer: Renderer
    jobs: JobRequests
