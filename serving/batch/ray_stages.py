"""The page pipeline (`pipelines.page`) as Ray Data row functions and model actors.

`ocr-batch --ray` (`serving.batch.ray_driver`) chains them over a dataset of pages:

    decode (CPU task) -> det (actors) -> after_det (CPU task) -> [cls (actors) -> after_cls]
        -> rec (actors) -> finish (CPU task)

Every row is one page. The CPU steps are the server's own (`pipelines.page`: the server runs them
in its CPU workers), and each actor owns one stage's predictor built from the same `[engine]`
settings as a server's device worker, so a page's text equals the server's. A page that fails
(bad input, a model error) carries its error to the end instead of failing the dataset; a lost
worker is Ray's to retry. Nothing here imports Ray: the functions are plain and testable alone.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from models.bundle import load_bundle
from models.spec import ModelSpec
from pipelines import page as pipeline
from pipelines.page import Step
from pipelines.stages import Stage
from serving.config import AppConfig
from serving.decode.documents import decode_page
from serving.decode.readers import DecodeLimits
from serving.engine.choice import engine_choice, model_stages
from serving.errors import OcrError
from serving.jobs.options import page_record
from serving.model_sets import default_pair
from serving.request_options import OcrOptions

logger = logging.getLogger(__name__)

Row = dict[str, Any]
"""One page: `name`, `sha256`, `path`, `kind`, `page`; then `image` and `step` while in flight;
at the end `record` (the result line as JSON) or `error_code` and `error_message`."""

OUTPUT_COLUMNS = ("name", "sha256", "page", "record", "error_code", "error_message")
"""What the driver reads back of each finished row."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PageSettings:
    """What the CPU steps need besides the row: decode limits, OCR options, CTC labels."""

    limits: DecodeLimits
    options: OcrOptions
    charset: tuple[str, ...]


def page_row(name: str, sha256: str, path: str, kind: str, page: int) -> Row:
    """A page to do, as the dataset's first rows hold it."""
    return {
        "name": name,
        "sha256": sha256,
        "path": path,
        "kind": kind,
        "page": page,
        "record": "",
        "error_code": "",
        "error_message": "",
    }


def decode(row: Row, settings: PageSettings) -> Row:
    """Decode the page as the server does (`serving.decode.documents.decode_page`) and prepare
    it for detection (`pipelines.page.prepare`)."""

    def step(row: Row) -> Row:
        image = decode_page(row["path"], row["kind"], row["page"], settings.limits)
        return {**row, "image": image, "step": pipeline.prepare(image, settings.options.det)}

    return _guarded(row, step)


def after_det(row: Row, settings: PageSettings) -> Row:
    """`pipelines.page.after_det`: boxes, reading order, crops, the next model's inputs."""
    options = settings.options

    def step(row: Row) -> Row:
        state = row["step"].state
        outputs = row["outputs"]
        nxt = pipeline.after_det(
            state, row["image"], outputs, options.det, options.rec, options.cls
        )
        return _next(row, nxt, image=None)

    return _guarded(row, step)


def after_cls(row: Row, settings: PageSettings) -> Row:
    """`pipelines.page.after_cls`: crops turned upright, the recogniser's inputs."""

    def step(row: Row) -> Row:
        state = row["step"].state
        return _next(row, pipeline.after_cls(state, row["outputs"], settings.options.rec))

    return _guarded(row, step)


def finish(row: Row, settings: PageSettings) -> Row:
    """`pipelines.page.finish`, then the page's result line (`page_record`, as `ocr-batch` and
    the jobs API write it); the arrays are dropped."""

    def step(row: Row) -> Row:
        state = row["step"].state
        result = pipeline.finish(state, row["outputs"], settings.options.rec, settings.charset)
        record = page_record(row["name"], row["page"], result, sha256=row["sha256"])
        return {**_bare(row), "record": json.dumps(record, ensure_ascii=False)}

    out = _guarded(row, step)
    return _bare(out)


class ModelActor:
    """One stage's predictor, loaded once per actor; runs every model call a page's step awaits.

    A Ray Data callable class: Ray builds it in each actor of the stage's pool (on a GPU when the
    pool asks for one; Ray then shows the actor that GPU alone, as device 0).
    """

    def __init__(self, config: AppConfig, stage: Stage, device: str) -> None:
        # Paddle warns about a missing ccache at import; it compiles nothing here.
        warnings.filterwarnings("ignore", message="No ccache found")
        bundle = load_bundle(
            config.models.det, config.models.rec, config.models.cls, config.models.ori
        )
        spec: ModelSpec | None = bundle.specs.get(stage)
        if spec is None:
            raise ValueError(f"no {stage} model is configured")
        engine = engine_choice(config, device)
        self.predictor = engine.predictor(spec)
        if stage in ("det", "rec"):  # at the precision this CPU's check allows (OpenVINO)
            from serving.engine.precision_check import check_precisions

            pair = {
                s: self.predictor if s == stage else engine.predictor(bundle.specs[s])
                for s in ("det", "rec")
            }
            check_precisions(pair, [default_pair(bundle, config.models.langs)])
        self.predictor.load()
        self.stage = model_stages({stage: self.predictor})[stage]
        logger.info("%s actor ready on %s", stage, device)

    def __call__(self, row: Row) -> Row:
        """Run the step's model calls for this stage; rows awaiting another stage pass through."""
        step: Step | None = row.get("step")
        if row["error_code"] or step is None or step.state.awaiting != self.stage.name:
            return row

        def run(row: Row) -> Row:
            outputs = [self.stage.output(self.predictor.run(batch)) for batch in step.inputs]
            return {**row, "step": Step(step.state, []), "outputs": outputs}

        return _guarded(row, run)


def cpu_threads_config(config: AppConfig, threads: int) -> AppConfig:
    """`config` with `threads` math threads per CPU predictor (one actor's share of a node)."""
    engine = dataclasses.replace(config.engine, cpu_threads=max(1, threads))
    return dataclasses.replace(config, engine=engine)


def _next(row: Row, step: Step, **changes: Any) -> Row:
    out = {**row, "step": step, "outputs": [], **changes}
    if out.get("image") is None:
        out.pop("image", None)
    return out


def _bare(row: Row) -> Row:
    return {k: v for k, v in row.items() if k not in ("image", "step", "outputs")}


def _guarded(row: Row, step: Callable[[Row], Row]) -> Row:
    """`step(row)`, or the row with the page's error: one bad page never fails its block.

    This is the per-page task boundary (like the server's pool task wrapper), so every error is
    caught here; worker loss is not an exception and is left to Ray's retries.
    """
    if row["error_code"]:
        return row
    try:
        return step(row)
    except OcrError as err:
        code, message = err.code, err.message
    except Exception as err:
        logger.exception("page %s of %s failed", row["page"], row["name"])
        code, message = "internal", f"{type(err).__name__}: {err}"
    return {**_bare(row), "error_code": code, "error_message": message}
