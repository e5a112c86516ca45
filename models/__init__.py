"""Model loading and inference adapters: model specs and bundles, engine backends, predictors."""

from __future__ import annotations

from models.base import (
    EngineBackend,
    EngineBackendError,
    Predictor,
    PredictorError,
    PredictorFactory,
    PredictorNotLoadedError,
)
from models.bundle import ModelBundle, load_bundle
from models.embedded import EmbeddedModelError, embedded_model_dir, resolve_model_dir
from models.engine_options import (
    DeviceKind,
    EngineOptions,
    EngineOptionsError,
    Precision,
    device_kind,
)
from models.fake_predictor import FakePredictor
from models.paddle_predictor import PaddlePredictor, build_config, paddle_version
from models.registry import BACKENDS, EngineChoice, backend_names, get_backend
from models.spec import (
    ModelFormat,
    ModelKind,
    ModelSpec,
    ModelSpecError,
    TrtShapeRange,
    load_model_spec,
)

__all__ = [
    "BACKENDS",
    "DeviceKind",
    "EmbeddedModelError",
    "EngineBackend",
    "EngineBackendError",
    "EngineChoice",
    "EngineOptions",
    "EngineOptionsError",
    "FakePredictor",
    "ModelBundle",
    "ModelFormat",
    "ModelKind",
    "ModelSpec",
    "ModelSpecError",
    "PaddlePredictor",
    "Precision",
    "Predictor",
    "PredictorError",
    "PredictorFactory",
    "PredictorNotLoadedError",
    "TrtShapeRange",
    "backend_names",
    "build_config",
    "device_kind",
    "embedded_model_dir",
    "get_backend",
    "load_bundle",
    "load_model_spec",
    "paddle_version",
    "resolve_model_dir",
]
