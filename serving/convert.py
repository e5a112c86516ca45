"""`python -m serving.convert` (`make convert`): the configured models as ONNX, before serving.

The command reads the server's config (the file, then `OCR_<SECTION>__<KEY>` variables) for the
models and `[engine] onnx_dir`, and hands them to `models.convert.convert_models`, which does the
work: models/ imports nothing from serving/.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from models import convert
from models.spec import ModelKind
from serving.config import AppConfig, load_config


def configured_models(config: AppConfig) -> dict[ModelKind, str]:
    """The models the server would load, by stage: det, rec, and cls where configured."""
    refs: dict[ModelKind, str] = {"det": config.models.det, "rec": config.models.rec}
    if config.models.cls:
        refs["cls"] = config.models.cls
    return refs


def main(argv: Sequence[str] | None = None) -> int:
    """Convert the configured models that have no conversion yet (see `models.convert`)."""
    parser = argparse.ArgumentParser(prog="python -m serving.convert", description=convert.__doc__)
    parser.add_argument("--config", type=Path, help="ocr-serve configuration (TOML)")
    parser.add_argument("--cache-dir", type=Path, help="default: the config's [engine] onnx_dir")
    parser.add_argument("--converter", type=Path, help="paddle2onnx executable")
    parser.add_argument("--opset", type=int, default=convert.OPSET)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = load_config(args.config, os.environ)
    cache_dir: Path = args.cache_dir or Path(config.engine.onnx_dir)
    converter: Path | None = args.converter or convert.default_converter()
    return convert.convert_models(configured_models(config), cache_dir, converter, args.opset)


if __name__ == "__main__":
    sys.exit(main())
