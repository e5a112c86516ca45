"""The engine seam: what a device worker needs from a loaded model, and from an engine backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from models.engine_options import DeviceKind, EngineOptions
from models.spec import ModelFormat, ModelSpec


class Predictor(Protocol):
    """One model on one device. Implementations: `PaddlePredictor` and `GpuPredictor` (Paddle on
    the CPU and on a GPU), `OpenVinoPredictor`, `OnnxRuntimePredictor`, `TorchPredictor` and
    `FakePredictor`, made by the engine backends of `models.registry`.

    Not thread-safe: use one instance per thread or process. Lifecycle: construct (no work),
    `load()`, `warmup()`, any number of `run()` calls, `close()`.
    """

    def load(self) -> None:
        """Create the underlying engine; idempotent."""
        ...

    def warmup(self) -> None:
        """Run one small valid input so the first real request does not pay for setup."""
        ...

    def run(self, batch: np.ndarray) -> np.ndarray:
        """Run one batch (float32, NCHW) and return the model's first output as a fresh array."""
        ...

    def close(self) -> None:
        """Release the engine; idempotent."""
        ...


@runtime_checkable
class ArgmaxOutput(Protocol):
    """A predictor that can reduce its model's output where the model runs.

    A recogniser's output is a probability for every class at every step (PP-OCRv5's: 18,385
    classes), of which CTC decoding reads only each step's best class and its probability. On a
    GPU that is 8 bytes a step to copy back to the host instead of 4 a class (a full rec batch:
    150 KB instead of 1.4 GB).
    """

    def output_argmax(self) -> None:
        """From now on, answer each batch (`run`, staged slots) with (..., 2) float32 pairs in
        place of the model's (..., C) output: the index of the largest value along the last axis
        (exact in float32 below 2**24; ties go to the first, as numpy's argmax), then that
        value. Idempotent; `pipelines.stages.ModelStage.argmax_output` reads the pairs."""
        ...


@runtime_checkable
class ByteMapOutput(Protocol):
    """A detector's predictor that can quantise its probability map to bytes where the model runs
    (`pipelines.det_byte_map`): on a GPU, a quarter of the float map's bytes to copy back and
    through shared memory, and nothing to convert on the device worker's thread (issue 40).
    """

    byte_map_thresh: float | None
    """The threshold its byte maps are exact at; None: it answers the float map."""

    def output_byte_map(self, thresh: float) -> None:
        """From now on, answer each batch (`run`, staged slots) with the uint8 byte map of the
        (n, 1, H, W) probability map, exact at `thresh` (`pipelines.det_byte_map.quantize_map`).
        `pipelines.stages.ModelStage.byte_map_output` reads it."""
        ...


@runtime_checkable
class AloneRunner(Protocol):
    """A predictor that can also run a batch on more threads than its own: the device's other
    workers are idle and nothing waits (`serving.workers.device_pool`), so a lone page's batch
    may use the whole machine. Its answers are the model's, as `run`'s (the sums may round
    otherwise: more threads split them differently)."""

    def run_alone(self, batch: np.ndarray) -> np.ndarray:
        """`run` on `EngineOptions.lone_threads` threads (`run` itself where it has none)."""
        ...


class PredictorError(RuntimeError):
    """A predictor could not be loaded or could not run a batch."""


class PredictorNotLoadedError(PredictorError):
    """`run()` or `warmup()` was called before `load()` or after `close()`."""


class SpecPredictor:
    """A base of predictor classes: the model it runs and the engine settings, as properties."""

    def __init__(self, spec: ModelSpec, options: EngineOptions) -> None:
        self._spec = spec
        self._options = options

    @property
    def spec(self) -> ModelSpec:
        """The model this predictor runs."""
        return self._spec

    @property
    def options(self) -> EngineOptions:
        """The engine settings."""
        return self._options


def not_loaded(spec: ModelSpec) -> PredictorNotLoadedError:
    """The error for a `run()` of `spec`'s predictor before `load()` or after `close()`."""
    return PredictorNotLoadedError(f"{spec.kind} predictor for {spec.directory} is not loaded")


def nchw_batch(batch: np.ndarray) -> np.ndarray:
    """The batch as a predictor runs it: a contiguous float32 NCHW array.

    Raises:
        ValueError: the batch is not 4-D.
    """
    if batch.ndim != 4:
        raise ValueError(f"expected an NCHW batch, got shape {batch.shape}")
    return np.ascontiguousarray(batch, dtype=np.float32)


def batch_failed(
    spec: ModelSpec, data: np.ndarray, err: Exception, note: str = ""
) -> PredictorError:
    """The error for an engine that failed on a batch (`note`: what else to say, as ` (...)`)."""
    return PredictorError(
        f"{spec.kind} model {spec.model_name} failed on input shape {data.shape}{note}: {err}"
    )


class EngineBackendError(ValueError):
    """An unknown engine backend, or one asked for a device or model format it does not serve."""


PredictorFactory = Callable[[ModelSpec, EngineOptions], Predictor]
"""Builds an unloaded predictor for a model and the options of one device (no work: `load()`)."""

SpecPreparer = Callable[[ModelSpec, EngineOptions], ModelSpec]
"""Finds a model in a format a backend reads for a spec stored in another (the ONNX engines: a
Paddle model's cached conversion); raises `EngineBackendError` saying what to run if none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineBackend:
    """An inference engine device workers can run models on, as listed in `models.registry`.

    A new engine is one module (its `Predictor` class and an `EngineBackend` constant) and one
    entry in `models.registry.BACKENDS`.
    """

    name: str
    """The name `[engine] cpu_backend` and `gpu_backend` use."""
    devices: frozenset[DeviceKind]
    """Device kinds it runs on."""
    formats: frozenset[ModelFormat]
    """Model formats it reads."""
    create: PredictorFactory
    """Called with a spec that holds one of `formats`."""
    prepare: SpecPreparer | None = None
    """How it serves models stored in other formats; None: it does not."""

    def resolve(self, spec: ModelSpec, options: EngineOptions) -> ModelSpec:
        """`spec` itself when the backend reads it, else what `prepare` finds for it (no work
        beyond looking: conversions are made ahead, never here).

        Raises:
            EngineBackendError: the backend does not read the model's format and cannot find it
                in one it reads; the message says what to run.
        """
        if spec.formats & self.formats:
            return spec
        if self.prepare is not None:
            return self.prepare(spec, options)
        raise EngineBackendError(
            f"engine backend {self.name!r} does not read {spec.format} models ({spec.directory})"
        )

    def predictor(self, spec: ModelSpec, options: EngineOptions) -> Predictor:
        """An unloaded predictor for `spec` on `options.device`.

        Raises:
            EngineBackendError: the backend does not run on that device kind, or does not read
                the model's format and has no prepared copy of it (see `resolve`).
        """
        if options.kind not in self.devices:
            raise EngineBackendError(
                f"engine backend {self.name!r} does not run on {options.kind} devices "
                f"({options.device})"
            )
        return self.create(self.resolve(spec, options), options)
