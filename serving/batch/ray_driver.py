"""`ocr-batch --ray`: documents through Ray Data, resumably, on a local or an existing cluster.

Python entry point::

    from serving.batch.ray_driver import ActorPools, run_on_ray
    summary = run_on_ray(["/mnt/scans/"], Path("out"), address="auto",
                         pools=ActorPools(det=4, rec=8, gpus_per_actor=0.5))
    print(summary.pages_per_s, summary.failures)

The driver lists the documents and their pages and leaves out the pages the output folder's
manifest already holds (`serving.batch.plan`, as every `ocr-batch` driver: the same folder and
format as the in-process `ocr-batch`, so either can resume the other's run), and streams the rest
through the stages of `serving.batch.ray_stages`. Each page is appended to the manifest, on disk,
as soon as its row reaches the driver; an interrupted run loses only the pages in flight. Lost
workers are Ray's to retry: decode and post-processing tasks are retried, model actors restarted
and their calls retried. At the end the results are written from the manifest: `results.jsonl`
(one line per page, as the jobs API's results) and `results.parquet`.

Documents are read by path on the workers: on a cluster, inputs live on a file system every node
mounts at the same path.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from serving.batch import ray_stages
from serving.batch.manifest import RESULTS, Manifest, PageKey
from serving.batch.outputs import BatchFormat, write_outputs
from serving.batch.plan import BatchError, PageTodo, open_plan
from serving.batch.ray_stages import ModelActor, PageSettings, Row
from serving.config import AppConfig, load_config
from serving.decode.readers import DecodeLimits
from serving.jobs.options import parse_options
from serving.model_sets import load_sets
from serving.request_options import ocr_options

logger = logging.getLogger(__name__)

PARQUET = "results.parquet"

TASK_RETRIES = 3
"""Retries of a task whose worker process died, and of a model call whose actor died (errors in a
page are the page's own: they are never retried). Bounded, so that a page that kills its worker
every time (a crash in the engine) costs that page's block, not the run."""
ACTOR_RESTARTS = 3
"""Restarts of a model actor whose process died (Ray Data's default is unbounded)."""
LOST = "worker_lost"
"""The error code of a page whose block failed past `TASK_RETRIES`; a rerun tries it again."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorPools:
    """How many actors own each model, and what each asks Ray for."""

    det: int = 1
    rec: int = 1
    cls: int = 1
    """Classifier actors, when the options run the classifier."""
    gpus_per_actor: float = 0.0
    """0: CPU actors; else each actor asks for this much GPU and its engine runs on it."""
    cpus_per_actor: float = 1.0
    """CPU cores a model actor reserves; a CPU actor's engine runs as many threads (at least 1)."""
    cpus_per_task: float = 1.0
    """CPU cores a decode or post-processing task reserves."""

    def __post_init__(self) -> None:
        for name in ("det", "rec", "cls"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} actors must be >= 1, got {getattr(self, name)}")
        if self.gpus_per_actor < 0 or self.cpus_per_actor <= 0 or self.cpus_per_task <= 0:
            raise ValueError("gpus_per_actor must be >= 0, cpus per actor and task > 0")


def cpus_needed(pools: ActorPools) -> float:
    """CPUs the pipeline holds at once at the least: every model actor (the classifier's
    counted, whether or not the options run it) and one task beside them. Less, and Ray Data
    waits for a CPU that never comes free."""
    return (pools.det + pools.rec + pools.cls) * pools.cpus_per_actor + pools.cpus_per_task


def fit_pools(
    pools: ActorPools, cpus: float, *, shrink: bool, say: Callable[[str], None]
) -> ActorPools:
    """`pools` on a cluster of `cpus` CPUs. On a Ray this run started (`shrink`), actors and
    tasks ask for proportionally less CPU when they would not fit all at once; on an existing
    cluster, whose autoscaler may add nodes, a warning says so.

    Found running the defaults on a 2-core machine: the det and rec actors took both CPUs and
    the decode tasks waited forever, silently.
    """
    needed = cpus_needed(pools)
    if cpus <= 0 or needed <= cpus:
        return pools
    if not shrink:
        say(
            f"the actors and one task ask for {needed:g} CPUs, the cluster has {cpus:g}: the run "
            "waits until it has more (lower --cpus-per-actor and --cpus-per-task to fit)"
        )
        return pools
    scale = cpus / needed
    fitted = dataclasses.replace(
        pools,
        cpus_per_actor=pools.cpus_per_actor * scale,
        cpus_per_task=pools.cpus_per_task * scale,
    )
    say(
        f"this Ray has {cpus:g} CPUs, the actors and one task ask for {needed:g}: each actor "
        f"asks for {fitted.cpus_per_actor:.2g} CPU and each task {fitted.cpus_per_task:.2g}"
    )
    return fitted


@dataclass(slots=True, kw_only=True)
class BatchSummary:
    """What a run did."""

    documents: int
    pages: int
    skipped: int
    """Pages already in the manifest: not run again."""
    done: list[PageKey] = field(default_factory=list)
    """Pages run and written by this run, in the order they finished."""
    failures: dict[PageKey, dict[str, str]] = field(default_factory=dict)
    """Pages that failed, with their error (code, message); a rerun tries them again."""
    done_at_s: list[float] = field(default_factory=list)
    """When each page of `done` reached the manifest, in seconds since the run started."""
    elapsed_s: float = 0.0
    written: list[Path] = field(default_factory=list)
    """Result files this run changed."""

    @property
    def pages_per_s(self) -> float:
        """Pages done by this run per second of its wall-clock time (start-up included)."""
        return len(self.done) / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def text(self) -> str:
        """One line for the user."""
        return (
            f"{len(self.done)} pages done now in {self.elapsed_s:.1f} s "
            f"({self.pages_per_s:.2f} pages/s), {self.skipped} skipped (already done), "
            f"{len(self.failures)} failed"
        )


def run_on_ray(
    inputs: Sequence[str],
    out: Path,
    *,
    config: AppConfig | None = None,
    options: Mapping[str, Any] | None = None,
    address: str | None = None,
    pools: ActorPools | None = None,
    fmt: BatchFormat = "jsonl",
    parquet: bool = True,
    pages_per_block: int = 1,
    on_page: Callable[[PageKey, bool], None] | None = None,
    say: Callable[[str], None] | None = None,
    progress: bool = False,
) -> BatchSummary:
    """OCR the documents `inputs` names (files, folders, globs) on Ray into the folder `out`.

    Args:
        inputs: Files, folders (walked recursively) and glob patterns.
        out: Output folder: `manifest.jsonl`, `results.jsonl`, `results.parquet`.
        config: Models, engine and pipeline settings (default: the built-in defaults).
        options: OCR options, checked and named as `ocr-batch -o` names them.
        address: Ray cluster ("HEAD:6379", "auto", "local": a new local Ray; not "ray://",
            Ray Client, where Ray Data does not stream); None:
            `RAY_ADDRESS`, else the cluster `ray start` started on this machine, else a new local
            Ray. Unused when Ray is already initialised in this process.
        pools: Actor pool sizes and resources.
        fmt: `ocr-batch --format`.
        parquet: Also write `results.parquet` (with `fmt` "jsonl").
        pages_per_block: Pages per Ray Data block: larger blocks cost less scheduling, smaller
            ones stream sooner and lose less on an interruption.
        on_page: Called with each page's key and whether it succeeded, once it is on disk.
        say: Where the plan line and problems go (default: this module's logger).
        progress: Show a progress bar (pages/s) on stderr; Ray Data's own bars stay off.

    Raises:
        BatchError: nothing to OCR.
        ValidationFailed: bad options.
        ConfigError: a bad configuration.
    """
    import ray  # an optional dependency: the `ray` extra

    started = time.monotonic()
    if (address or os.environ.get("RAY_ADDRESS", "")).startswith("ray://"):
        # Tried with Ray 2.60: the streaming executor fails under Ray Client ("'Worker' object
        # has no attribute 'core_worker'").
        raise BatchError(
            "Ray Data does not run over Ray Client (ray://): run ocr-batch on a node of the "
            "cluster with --ray=HEAD:6379 (or --ray with RAY_ADDRESS=HEAD:6379), or as a Ray job"
        )
    config = config or load_config(None, os.environ)
    checked = parse_options(dict(options or {}))
    say = say or (lambda message: logger.warning("%s", message))
    plan, manifest = open_plan(inputs, out, checked, say)
    todo = plan.todo
    summary = BatchSummary(documents=len(plan.documents), pages=plan.pages, skipped=plan.skipped)
    owns_ray = False
    try:
        if todo:
            if not ray.is_initialized():
                ray.init(address=address, logging_level=logging.WARNING)
                owns_ray = True
            cpus = float(ray.cluster_resources().get("CPU", 0.0))  # type: ignore[no-untyped-call]
            pools = fit_pools(pools or ActorPools(), cpus, shrink=owns_ray, say=say)
            with (
                _data_context(
                    enable_progress_bars=False,
                    max_errored_blocks=-1,  # a block lost past its retries costs its pages only
                    enable_fallback_to_arrow_object_ext_type=True,  # page states: pickled
                ),
                tqdm(
                    total=len(todo),
                    unit="page",
                    desc="ocr-batch",
                    disable=not progress,
                    file=sys.stderr,
                ) as bar,
            ):
                dataset = build_dataset(config, checked, todo, pools, pages_per_block)
                _collect(dataset, manifest, summary, on_page, bar, say, started)
            for doc, page in todo:
                key = (doc.sha256, page)
                if not manifest.done(key) and key not in summary.failures:
                    message = "its worker died more often than Ray retries; see Ray's logs"
                    summary.failures[key] = {"code": LOST, "message": message}
                    say(f"{doc.name} page {page + 1}: {message}")
    finally:
        manifest.close()
        if owns_ray:
            ray.shutdown()
        summary.elapsed_s = time.monotonic() - started
    summary.written = write_outputs(
        out, fmt, plan.documents, manifest, summary.failures, inputs=config.input
    )
    if parquet and fmt == "jsonl" and (summary.written or not (out / PARQUET).exists()):
        summary.written.append(write_parquet(out / RESULTS, out / PARQUET))
    return summary


def for_model_set(config: AppConfig, options: dict[str, Any]) -> AppConfig:
    """`config` with the model set the run's `lang` or `model` picks (`serving.model_sets`) as
    its default: one run reads every page with one set, so its actors load that set's det and
    rec as their own.

    Raises:
        ValidationFailed: no set reads the `lang`, or none is named the `model`.
    """
    sets = load_sets(config.models)
    chosen = sets.pick(options.get("lang"), options.get("model"))
    if chosen is sets.default:
        return config
    spec = config.models.sets[chosen.name]
    models = dataclasses.replace(
        config.models,
        det=spec.det or config.models.det,
        rec=spec.rec,
        name=chosen.name,
        langs=tuple(sorted(chosen.langs)),
        sets={},
    )
    return dataclasses.replace(config, models=models)


def build_dataset(
    config: AppConfig,
    options: dict[str, Any],
    todo: Sequence[PageTodo],
    pools: ActorPools,
    pages_per_block: int = 1,
) -> Any:
    """The Ray Data pipeline over the pages `todo` (lazy: nothing runs until it is read)."""
    import ray.data

    from models.bundle import load_bundle

    config = for_model_set(config, options)
    bundle = load_bundle(config.models.det, config.models.rec, config.models.cls)
    settings = PageSettings(
        limits=DecodeLimits(
            max_pdf_pages=config.input.max_pdf_pages,
            pdf_render_scale=config.input.pdf_render_scale,
            max_image_pixels=config.input.max_image_pixels,
            max_frames_per_document=config.input.max_frames_per_document,
        ),
        options=ocr_options(bundle, config.pipeline, **options),
        charset=bundle.charset,
    )
    rows = [
        ray_stages.page_row(doc.name, doc.sha256, str(doc.path), doc.kind, page)
        for doc, page in todo
    ]
    blocks = max(1, math.ceil(len(rows) / max(1, pages_per_block)))
    dataset: Any = ray.data.from_items(rows, override_num_blocks=blocks)
    task: dict[str, Any] = {
        "fn_kwargs": {"settings": settings},
        "num_cpus": pools.cpus_per_task,
        "max_retries": TASK_RETRIES,
    }
    gpu = pools.gpus_per_actor > 0
    device = "gpu:0" if gpu else "cpu"  # Ray shows a GPU actor its own GPU as device 0
    actor_config = ray_stages.cpu_threads_config(config, int(pools.cpus_per_actor))

    def model(stage: str, size: int) -> dict[str, Any]:
        return {
            "fn_constructor_kwargs": {"config": actor_config, "stage": stage, "device": device},
            "compute": ray.data.ActorPoolStrategy(size=size),
            "num_cpus": pools.cpus_per_actor,
            "num_gpus": pools.gpus_per_actor if gpu else None,
            "max_restarts": ACTOR_RESTARTS,
            "max_task_retries": TASK_RETRIES,
        }

    with warnings.catch_warnings():
        # Ray 2.60 takes retry bounds only as `ray_remote_args`, deprecated for 2.64 with no named
        # replacement yet; revisit when the pin moves.
        warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
        dataset = dataset.map(ray_stages.decode, **task)
        dataset = dataset.map(ModelActor, **model("det", pools.det))
        dataset = dataset.map(ray_stages.after_det, **task)
        if settings.options.cls is not None:
            dataset = dataset.map(ModelActor, **model("cls", pools.cls))
            dataset = dataset.map(ray_stages.after_cls, **task)
        dataset = dataset.map(ModelActor, **model("rec", pools.rec))
        dataset = dataset.map(ray_stages.finish, **task)
    return dataset.select_columns(list(ray_stages.OUTPUT_COLUMNS))


def write_parquet(results: Path, target: Path) -> Path:
    """`results.jsonl` as Parquet: the same records, one row per page."""
    import pyarrow.json
    import pyarrow.parquet

    table = pyarrow.json.read_json(results)
    tmp = target.with_name(f".{target.name}.tmp")
    pyarrow.parquet.write_table(table, tmp)
    tmp.replace(target)
    return target


@contextlib.contextmanager
def _data_context(**values: Any) -> Iterator[None]:
    """Ray Data settings for this run, the caller's restored after it."""
    import ray.data

    context = ray.data.DataContext.get_current()
    before = {name: getattr(context, name) for name in values}
    for name, value in values.items():
        setattr(context, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(context, name, value)


def _collect(
    dataset: Any,
    manifest: Manifest,
    summary: BatchSummary,
    on_page: Callable[[PageKey, bool], None] | None,
    bar: tqdm[Any],
    say: Callable[[str], None],
    started: float,
) -> None:
    """Write each finished page to the manifest as it streams back (one sync per block)."""
    for batch in dataset.iter_batches(batch_size=None, batch_format="pandas"):
        rows: list[Row] = batch.to_dict("records")
        finished: list[tuple[PageKey, bool]] = []
        for row in rows:
            key = (str(row["sha256"]), int(row["page"]))
            if row["record"]:
                manifest.append(key, json.loads(row["record"]), sync=False)
                summary.done.append(key)
                finished.append((key, True))
            else:
                summary.failures[key] = {
                    "code": str(row["error_code"]),
                    "message": str(row["error_message"]),
                }
                say(f"{row['name']} page {key[1] + 1}: {row['error_message']}")
                finished.append((key, False))
        manifest.sync()
        now = time.monotonic() - started
        summary.done_at_s.extend(now for _, ok in finished if ok)
        bar.update(len(rows))
        if on_page is not None:
            for key, ok in finished:
                on_page(key, ok)


def main_ray(args: argparse.Namespace, options: dict[str, Any], config: AppConfig) -> int:
    """`ocr-batch --ray`: 0 when every page is done, 1 when some failed."""
    pools = ActorPools(
        det=args.det_actors,
        rec=args.rec_actors,
        cls=args.cls_actors,
        gpus_per_actor=args.gpus_per_actor,
        cpus_per_actor=args.cpus_per_actor,
        cpus_per_task=args.cpus_per_task,
    )
    summary = run_on_ray(
        args.inputs,
        args.out,
        config=config,
        options=options,
        address=args.ray or None,
        pools=pools,
        fmt=args.format,
        say=_say,
        progress=not args.quiet,
    )
    written = ", ".join(str(p) for p in summary.written) or "outputs unchanged"
    _say(f"{summary.text()}; {written}")
    for (sha256, page), error in summary.failures.items():
        _say(f"failed: {sha256[:12]} page {page + 1}: {error['message']}")
    return 1 if summary.failures else 0


def _say(message: str) -> None:
    sys.stdout.write(f"ocr-batch: {message}\n")
    sys.stdout.flush()
