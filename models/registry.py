"""The engine backends device workers can run, by name: the one list a new engine joins."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from models.base import EngineBackend, EngineBackendError, Predictor
from models.engine_options import DeviceKind, EngineOptions
from models.fake_predictor import FAKE
from models.onnxruntime_backend import ONNXRUNTIME
from models.openvino_backend import OPENVINO
from models.paddle_backend import PADDLE
from models.spec import ModelSpec
from models.torch_backend import TORCH

BACKENDS: Final[Mapping[str, EngineBackend]] = MappingProxyType(
    {backend.name: backend for backend in (PADDLE, OPENVINO, ONNXRUNTIME, TORCH, FAKE)}
)
"""Every engine backend `[engine] cpu_backend` and `gpu_backend` may name."""


def backend_names(kind: DeviceKind | None = None) -> tuple[str, ...]:
    """The registered backends, or those that run on `kind` devices."""
    return tuple(name for name, b in BACKENDS.items() if kind is None or kind in b.devices)


def get_backend(ref: str) -> EngineBackend:
    """A registered backend by name, or the `EngineBackend` that "module:attribute" names.

    The second form lets tests run device workers on backends of their own (fakes that inject
    faults); configuration names registered backends only.

    Raises:
        EngineBackendError: no such backend, or the attribute is not an `EngineBackend`.
    """
    module_name, colon, attribute = ref.partition(":")
    if not colon:
        try:
            return BACKENDS[ref]
        except KeyError:
            known = ", ".join(BACKENDS)
            raise EngineBackendError(f"unknown engine backend {ref!r}: one of {known}") from None
    try:
        backend = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        raise EngineBackendError(f"cannot import engine backend {ref!r}: {err}") from err
    if not isinstance(backend, EngineBackend):
        raise EngineBackendError(f"{ref} is a {type(backend).__name__}, not an EngineBackend")
    return backend


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineChoice:
    """The engine of one device worker: a backend and the options for that worker's device.

    Small and picklable: it travels to the worker process, which creates its predictors with it.
    """

    backend: str
    """A name in `BACKENDS`, or "module:attribute" naming an `EngineBackend` (tests)."""
    options: EngineOptions

    def predictor(self, spec: ModelSpec, *, max_batch_rows: int | None = None) -> Predictor:
        """An unloaded predictor for `spec`.

        Args:
            spec: the model.
            max_batch_rows: the largest batch it will be given; sizes TensorRT profiles.

        Raises:
            EngineBackendError: the backend is unknown, or does not serve this device or model.
        """
        options = self.options
        if max_batch_rows is not None:
            options = dataclasses.replace(options, trt_max_batch_size=max_batch_rows)
        return get_backend(self.backend).predictor(spec, options)
