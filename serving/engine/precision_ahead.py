"""`python -m serving.engine.precision_ahead`: this CPU's precision check for the configured
model sets, run now rather than in the first device worker that starts.

The verdicts land in `engine.precision_check_dir`, where the server's workers then read them:
before a rollout on a new kind of machine, in a deployment's init step, or before a test suite
starts many servers (tests/e2e/conftest.py). Prints what the check found for each model.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from models.precision_verdict import ModelCheck
from serving.config import AppConfig, load_config
from serving.engine.choice import engine_choice
from serving.engine.precision_check import check_precisions
from serving.model_sets import load_sets


def check_configured(config: AppConfig) -> dict[str, ModelCheck]:
    """Run (or read from the cache) the check for every configured set's detector and
    recogniser on the CPU engine, as a CPU device worker would (on its lone-batch threads);
    by stage. Nothing where the engine or the setting needs no check."""
    sets = load_sets(config.models)
    engine = engine_choice(config, "cpu", alone=True)
    predictors: dict[str, object] = {}
    for model_set in sets.all:
        for kind in ("det", "rec"):
            stage = model_set.stage(kind)
            if stage not in predictors:
                predictors[stage] = engine.predictor(model_set.bundle.specs[kind])
    return check_precisions(predictors, sets.pairs())


def main(argv: Sequence[str] | None = None) -> int:
    """Check the configured models' precisions on this CPU; print each verdict as JSON."""
    parser = argparse.ArgumentParser(prog="python -m serving.engine.precision_ahead")
    parser.add_argument("--config", type=Path, help="ocr-serve configuration (TOML)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    checks = check_configured(load_config(args.config, os.environ))
    print(json.dumps({stage: c.describe() for stage, c in checks.items()}, indent=1))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
