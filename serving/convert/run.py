"""`python -m serving.convert` (`make convert`): the configured models as ONNX, before serving.

The command reads the server's config (the file, then `OCR_<SECTION>__<KEY>` variables) for the
models and `[engine] onnx_dir`, and hands them to `models.convert.convert_models`, which does the
work: models/ imports nothing from serving/. With `--int8` (`make convert-int8`) it then
quantises each converted model to int8 with NNCF (`models.quantize`), calibrated on held-out
document pages (`serving.convert.calibration`), for `engine.openvino_precision = "int8"`; models
that have their int8 form already are left alone, and then no page is rendered. With
`--int8-without-bf16` (`make convert-no-bf16`) it does so for the default set only where this
CPU has no bf16 (`engine.openvino_bf16` honoured) and `engine.openvino_precision` is "auto",
which then serves the int8 models where this CPU's check passes them (issue 46 item 5:
PP-OCRv6 small at f32 reads 0.7x PP-OCRv5 mobile's pages/s; about 3 minutes on 2 cores, once);
where it cannot (no NNCF, no calibration pages) it says why and the server serves f32. It also
renders the precision check's pages (`serving.engine.check_set`) once, beside the conversions:
each CPU proves bf16 and int8 on them at start-up. With `--paddle` (`make convert-paddle`) it
converts the other way, for the Paddle engine: the configured ONNX models (PP-OCRv6 small, the
default set) into `[engine] paddle_dir` with X2Paddle (`models.paddle_convert`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from models import convert, paddle_convert, quantize
from models.embedded import resolve_model_dir
from models.paddle_convert import CONVERTS_TO_PADDLE
from models.spec import ModelKind, ModelSpec, load_model_spec
from serving.config import AppConfig, load_config

logger = logging.getLogger(__name__)


def configured_models(config: AppConfig) -> dict[ModelKind, str]:
    """The models the server would load, by stage: det, rec, and cls where configured."""
    refs: dict[ModelKind, str] = {"det": config.models.det, "rec": config.models.rec}
    if config.models.cls:
        refs["cls"] = config.models.cls
    return refs


def set_models(config: AppConfig) -> dict[str, str]:
    """The other model sets' own models (`[models.sets.NAME]`), by their stage ("rec@NAME",
    "det@NAME"): converted with the default's, never quantised."""
    refs: dict[str, str] = {}
    for name, model_set in config.models.sets.items():
        if model_set.det and model_set.det != config.models.det:
            refs[f"det@{name}"] = model_set.det
        refs[f"rec@{name}"] = model_set.rec
    return refs


def main(argv: Sequence[str] | None = None) -> int:
    """Convert the configured models that have no conversion yet (see `models.convert`)."""
    parser = argparse.ArgumentParser(prog="python -m serving.convert", description=convert.__doc__)
    parser.add_argument("--config", type=Path, help="ocr-serve configuration (TOML)")
    parser.add_argument(
        "--cache-dir", type=Path, help="default: the config's [engine] onnx_dir (paddle_dir)"
    )
    parser.add_argument(
        "--converter", type=Path, help="paddle2onnx executable (with --paddle: x2paddle)"
    )
    parser.add_argument(
        "--paddle",
        action="store_true",
        help="convert the ONNX models for the Paddle engine instead (X2Paddle, engine.paddle_dir)",
    )
    parser.add_argument("--opset", type=int, default=convert.OPSET)
    parser.add_argument(
        "--int8", action="store_true", help="also quantise the models to int8 (NNCF)"
    )
    parser.add_argument(
        "--int8-without-bf16",
        action="store_true",
        help='quantise the default set to int8 where this CPU has no bf16 ("auto" serves it)',
    )
    parser.add_argument(
        "--docs-root",
        type=Path,
        default=Path("/"),
        help="where the Debian doc PDFs of the precision check's pages are (default: installed)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = load_config(args.config, os.environ)
    refs: dict[str, str] = {str(k): ref for k, ref in configured_models(config).items()}
    refs.update(set_models(config))
    if args.paddle:
        paddle_dir: Path = args.cache_dir or Path(config.engine.paddle_dir)
        x2paddle = args.converter or paddle_convert.default_converter()
        readers = {k: ref for k, ref in refs.items() if k.partition("@")[0] in CONVERTS_TO_PADDLE}
        return paddle_convert.convert_models(readers, paddle_dir, x2paddle)
    cache_dir: Path = args.cache_dir or Path(config.engine.onnx_dir)
    converter: Path | None = args.converter or convert.default_converter()
    status = convert.convert_models(refs, cache_dir, converter, args.opset)
    if status != 0:
        return status
    status = build_check_set(cache_dir, args.docs_root)
    if status != 0:
        return status
    if args.int8:
        return quantize_models(config, cache_dir, args.opset)
    wanted = args.int8_without_bf16 and int8_for_auto(config)
    if wanted and quantize_models(config, cache_dir, args.opset, required=False) != 0:
        logger.warning(
            "no int8 models: this CPU has no bf16, so the default set serves f32 (%s)",
            quantize.CONVERT_INT8_COMMAND,
        )
    return 0


def int8_for_auto(config: AppConfig) -> bool:
    """Whether "auto" would serve int8 models here: OpenVINO at "auto" on a CPU without bf16
    (as `engine.openvino_bf16` takes it); logs why not where it would not."""
    from models.base import PredictorError
    from models.onnx_predictor import import_engine
    from models.openvino_precision import effective_capabilities, has_bf16

    engine = config.engine
    if engine.cpu_backend != "openvino" or engine.openvino_precision != "auto":
        logger.info(
            "int8: not made (cpu_backend %s, openvino_precision %s: only auto serves it unasked)",
            engine.cpu_backend,
            engine.openvino_precision,
        )
        return False
    try:
        ov = import_engine("openvino", "openvino")
    except PredictorError as err:  # not installed: the CPU engine serves nothing int8
        logger.warning("int8: not made, OpenVINO does not load: %s", err)
        return False
    probed = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if has_bf16(effective_capabilities(probed, engine.openvino_bf16)):
        logger.info("int8: not made, this CPU has bf16 (auto checks bf16 first)")
        return False
    logger.info("int8: this CPU has no bf16: the default set at int8 (~3 min on 2 cores, once)")
    return True


def build_check_set(cache_dir: Path, docs_root: Path = Path("/")) -> int:
    """Render the precision check's pages into `cache_dir` (`serving.engine.check_set`) where
    they are not there yet (or lack what is installed now), saying which languages it could not
    have; exit status 0, or 1 where it cannot be written."""
    from serving.engine.check_set import check_set_dir, ensure_check_set

    directory = check_set_dir(cache_dir)
    try:
        found = ensure_check_set(directory, docs_root)
    except (OSError, ValueError) as err:
        logger.error("precision check set %s: %s", directory, err)
        return 1
    logger.info(
        "precision check set: %s (%s)%s",
        directory,
        ", ".join(found.languages) or "empty",
        "".join(f"; no {lang}: {why}" for lang, why in found.missing.items()),
    )
    return 0


def quantize_models(
    config: AppConfig, cache_dir: Path, opset: int = convert.OPSET, *, required: bool = True
) -> int:
    """Quantise the configured models' ONNX conversions in `cache_dir` to int8 where they have
    no int8 form yet, logging a line a model; exit status 0, or 1 where quantisation failed
    (not `required`: also where NNCF or the calibration pages are missing, logged)."""
    # Imported here: it renders pages and loads the pipeline, which plain conversion needs not.
    from serving.convert import calibration

    specs: dict[str, ModelSpec] = {}
    for kind, ref in configured_models(config).items():
        spec = convert.onnx_spec(load_model_spec(resolve_model_dir(ref), kind), cache_dir, opset)
        found = quantize.find_int8(spec, cache_dir)
        if found is None:
            specs[kind] = spec
        else:
            logger.info("%s %s: %s (int8 cached)", kind, ref, found)
    if not specs:
        return 0
    engine = dataclasses.replace(config.engine, onnx_dir=str(cache_dir))
    if not required:
        try:
            quantize.import_nncf()
            pages = calibration.calibration_pages()
        except (convert.ModelConversionError, RuntimeError) as err:
            logger.warning("int8: %s", err)
            return 1
    else:
        pages = calibration.calibration_pages()
    inputs = calibration.calibration_inputs(dataclasses.replace(config, engine=engine), pages)
    described = calibration.describe(pages)
    for stage, spec in specs.items():
        try:
            path, _ = quantize.quantize(spec, inputs.get(stage, []), cache_dir, described)
        except convert.ModelConversionError as err:
            logger.error("%s", err)
            return 1
        logger.info("%s %s: %s (int8 quantised)", stage, spec.model_name, path)
    return 0
