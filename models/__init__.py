"""Model loading and inference adapters: model specs, embedded models and predictors."""

from __future__ import annotations

from models.base import Predictor, PredictorError, PredictorNotLoadedError
from models.embedded import EmbeddedModelError, embedded_model_dir, resolve_model_dir
from models.fake_predictor import FakePredictor
from models.paddle_predictor import (
    EngineOptions,
    EngineOptionsError,
    PaddlePredictor,
    build_config,
    paddle_version,
)
from models.spec import ModelKind, ModelSpec, ModelSpecError, TrtShapeRange, load_model_spec

__all__ = [
    "EmbeddedModelError",
    "EngineOptions",
    "EngineOptionsError",
    "FakePredictor",
    "ModelKind",
    "ModelSpec",
    "ModelSpecError",
    "PaddlePredictor",
    "Predictor",
    "PredictorError",
    "PredictorNotLoadedError",
    "TrtShapeRange",
    "build_config",
    "embedded_model_dir",
    "load_model_spec",
    "paddle_version",
    "resolve_model_dir",
]
