"""The device workers the config names: `workers.devices` resolved into one spec per process
("auto" counts the GPUs the GPU engine can use, in a child process so this one imports no engine),
and each device's engine checked against the models before any process starts."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys

from models.base import EngineBackendError
from models.bundle import ModelBundle
from models.registry import get_backend
from serving.config import STAGES, AppConfig
from serving.engine.choice import engine_choice
from serving.engine.gpu_choice import AUTO, GpuEngineChoice, choose_gpu_engine, nvidia_gpus_present
from serving.model_sets import ModelSet, ModelSets, stage_kind
from serving.workers.device_worker import DeviceSpec

logger = logging.getLogger(__name__)


GPU_COUNT_CODE = {
    "paddle": (
        "import paddle\n"
        "print(paddle.device.cuda.device_count() if paddle.is_compiled_with_cuda() else 0)"
    ),
    "torch": "import torch\nprint(torch.cuda.device_count() if torch.cuda.is_available() else 0)",
}
"""How each GPU engine counts the GPUs it can use (asked in a child process)."""


def visible_gpus(backend: str = "paddle") -> int:
    """GPUs the GPU engine `backend` can use, asked in a child process so this one imports no
    engine. On a host with NVIDIA GPUs that the engine cannot use (Paddle's CPU build, torch
    missing), says what it found and what to install."""
    code = GPU_COUNT_CODE.get(backend)
    count = 0
    if code is not None:
        try:
            out = subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            count = int(out.stdout.strip().splitlines()[-1])
        except (subprocess.SubprocessError, ValueError, IndexError, OSError):
            logger.warning("%s could not count GPUs", backend)
    present = nvidia_gpus_present()
    if count == 0 and present:
        logger.warning(
            "found %d NVIDIA GPU(s) but engine.gpu_backend = %r cannot use them, so devices = "
            "'auto' serves on the CPU. To serve on them: make serve-gpu (make install-torch "
            'convert, then [engine] gpu_backend = "torch" or "auto"; README: GPUs)',
            present,
            backend,
        )
    return count


def gpu_engine(config: AppConfig) -> GpuEngineChoice:
    """Which engine GPU device workers run, and why, for the log and `/readyz`: with
    `engine.gpu_backend = "auto"` probed (`serving.engine.gpu_choice`) when `workers.devices`
    may hold a GPU, else the configured one."""
    setting = config.engine.gpu_backend
    if setting != AUTO:
        return GpuEngineChoice(setting=setting, backend=setting, gpus=None, reason="configured")
    if not any(d == "auto" or d.startswith("gpu:") for d in config.workers.devices):
        return GpuEngineChoice(backend=None, gpus=0, reason="workers.devices names no GPU")
    return choose_gpu_engine()


def device_specs(config: AppConfig, gpu_count: int | None = None) -> list[DeviceSpec]:
    """Resolve `workers.devices` into one spec per device worker process."""
    workers = config.workers
    devices: list[str] = []
    for entry in workers.devices:
        if entry == "auto":
            backend = config.engine.gpu_backend
            if gpu_count is not None:
                count = gpu_count
            elif backend == AUTO:
                count = choose_gpu_engine().gpus or 0
            else:
                count = visible_gpus(backend)
            devices.extend([f"gpu:{i}" for i in range(count)] or ["cpu"])
        else:
            devices.append(entry)
    specs = []
    for device in dict.fromkeys(devices):
        kind = workers.gpu if device.startswith("gpu:") else workers.cpu
        instances = workers.gpu_instances if device.startswith("gpu:") else workers.cpu_instances
        for i in range(instances):
            name = device if instances == 1 else f"{device}#{i}"
            max_rows = {stage: kind.limits(stage).max_batch_size for stage in STAGES}
            specs.append(
                DeviceSpec(
                    name=name,
                    device=device,
                    stages=kind.stages,
                    max_rows=max_rows,
                    engine=engine_choice(config, device, alone=True),
                    queued_batches=kind.queued_batches,
                )
            )
    return specs


def check_engines(bundle: ModelBundle, specs: list[DeviceSpec]) -> None:
    """Fail before any process starts when a device's engine cannot serve a model it is given,
    e.g. an ONNX engine with no conversion of a Paddle model (the message says what to run).

    Raises:
        EngineBackendError: a backend is unknown, or has no form of a model that it reads.
    """
    models = bundle.specs
    for device in specs:
        backend = get_backend(device.engine.backend)
        for stage in device.stages:
            if stage in models:
                backend.resolve(models[stage], device.engine.options)


def check_set_engines(model_set: ModelSet, specs: list[DeviceSpec]) -> None:
    """`check_engines` for a model set's own models (`serving.model_sets`), on every device
    worker that serves their kind of stage.

    Raises:
        EngineBackendError: a device's engine cannot read one of the set's models.
    """
    models = model_set.bundle.specs
    for device in specs:
        backend = get_backend(device.engine.backend)
        for kind in model_set.stages:
            if kind in device.stages:
                backend.resolve(models[kind], device.engine.options)


def readable_default(sets: ModelSets, specs: list[DeviceSpec]) -> ModelSets:
    """`sets` with a default set whose detector and recogniser every device worker's engine
    reads: as they are, or, where one cannot (the Paddle engine, PP-OCRv6 small not converted
    by `make convert-paddle`), with the first other set they all read as the default (a warning
    in the log; the old default listed under `unavailable`, in `GET /v1/models` and `/readyz`,
    with why), rather than the server not starting.

    Raises:
        EngineBackendError: no configured set is read by every device worker's engine (the
            default's error: the message says what to run).
    """
    try:
        _check_set_models(sets.default, specs)
    except EngineBackendError as err:
        for model_set in sets.extra:
            try:
                _check_set_models(model_set, specs)
            except EngineBackendError:
                continue
            return sets.promote(model_set.name, str(err))
        raise
    return sets


def _check_set_models(model_set: ModelSet, specs: list[DeviceSpec]) -> None:
    models = model_set.bundle.specs
    for device in specs:
        backend = get_backend(device.engine.backend)
        for kind in ("det", "rec"):
            if kind in device.stages:
                backend.resolve(models[kind], device.engine.options)


def with_sets(specs: list[DeviceSpec], set_stages: list[str]) -> list[DeviceSpec]:
    """`specs` with each worker also serving the model sets' stages ("rec@NAME") of the kinds
    it serves, with the same batch rows: a worker pulls every set's batches of its stages."""
    out = []
    for spec in specs:
        more = tuple(s for s in set_stages if stage_kind(s) in spec.stages)
        rows = {s: spec.max_rows[stage_kind(s)] for s in more if stage_kind(s) in spec.max_rows}
        out.append(
            dataclasses.replace(
                spec, stages=(*spec.stages, *more), max_rows={**spec.max_rows, **rows}
            )
        )
    return out


def with_backend(specs: list[DeviceSpec], backend: str) -> list[DeviceSpec]:
    """`specs` with every device worker's engine backend replaced by `backend`, a registered name
    or "module:attribute" naming an `EngineBackend` (tests serve with fakes).

    Raises:
        EngineBackendError: `backend` names no engine backend (here, not in every worker).
    """
    get_backend(backend)
    return [
        dataclasses.replace(s, engine=dataclasses.replace(s.engine, backend=backend)) for s in specs
    ]


def without_unread_orientation(
    bundle: ModelBundle, specs: list[DeviceSpec]
) -> tuple[ModelBundle, list[DeviceSpec]]:
    """The page-orientation classifier served only by the devices whose engine reads it (the
    packaged one is ONNX only: Paddle's engine does not); where none does, it is not served and
    pages are read as sent, with a warning, rather than the server not starting."""
    if bundle.ori is None:
        return bundle, specs
    kept: list[DeviceSpec] = []
    for device in specs:
        if "ori" in device.stages:
            try:
                get_backend(device.engine.backend).resolve(bundle.ori, device.engine.options)
            except EngineBackendError as err:
                logger.warning("%s does not serve page orientation: %s", device.name, err)
                stages = tuple(s for s in device.stages if s != "ori")
                device = dataclasses.replace(device, stages=stages)
        kept.append(device)
    if not any("ori" in device.stages for device in kept):
        logger.warning(
            "no device worker serves the page-orientation classifier (models.ori): pages are "
            "read as sent (pipeline.orientation = 'auto' has no effect)"
        )
        return dataclasses.replace(bundle, ori=None), kept
    return bundle, kept
