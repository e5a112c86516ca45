"""Paddle Inference adapter: predictor configuration and the handle-API runner.

This is the only module that imports paddle, and it does so lazily (in `load()` and
`paddle_version()`), so importing it stays cheap and works where paddle is not installed.
"""

from __future__ import annotations

import importlib
import logging
import re
from types import ModuleType
from typing import Any

import numpy as np

from models.base import PredictorError, SpecPredictor, batch_failed, nchw_batch, not_loaded
from models.engine_options import EngineOptions, EngineOptionsError
from models.spec import ModelSpec

logger = logging.getLogger(__name__)

ONEDNN_PLACEMENT_PASS = "onednn_placement_pass"
"""Deleting it works around Paddle 3.3.x's oneDNN `nearest_interp` failure (Paddle #77340)."""

_VERSION_RE = re.compile(r"version:\s*(\S+)")


def parse_paddle_version(text: str) -> tuple[int, int]:
    """Major and minor from "3.3.1" or `paddle.inference.get_version()`'s "version: 3.3.1 ..."."""
    found = _VERSION_RE.search(text)
    version = found.group(1) if found else text.strip()
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return 0, 0


def onednn_fails_on_det(version: str) -> bool:
    """Whether this Paddle release fails on the detector with plain oneDNN (Paddle #77340)."""
    return parse_paddle_version(version) == (3, 3)


def needs_onednn_placement_workaround(
    spec: ModelSpec, options: EngineOptions, version: str
) -> bool:
    """Whether det on CPU+oneDNN must drop `onednn_placement_pass` to run at all.

    Paddle 3.3.0/3.3.1 fail with `ConvertPirAttribute2RuntimeAttribute not support
    [pir::ArrayAttribute<pir::DoubleAttribute>]` on oneDNN `nearest_interp` with a `scale`
    attribute, which the PP-OCR det FPN neck uses (Paddle #77340; the fix is in no release).
    """
    return (
        spec.kind == "det"
        and options.auto_delete_passes
        and not options.is_gpu
        and options.enable_mkldnn
        and onednn_fails_on_det(version)
    )


def passes_to_delete(spec: ModelSpec, options: EngineOptions, version: str) -> tuple[str, ...]:
    """The configured passes plus any automatic workaround, without duplicates."""
    passes = list(dict.fromkeys(options.delete_passes))
    if (
        needs_onednn_placement_workaround(spec, options, version)
        and ONEDNN_PLACEMENT_PASS not in passes
    ):
        passes.append(ONEDNN_PLACEMENT_PASS)
    return tuple(passes)


def trt_shape_info(
    spec: ModelSpec, max_batch_size: int | None = None
) -> tuple[dict[str, list[int]], dict[str, list[int]], dict[str, list[int]]]:
    """(min, max, opt) shape dicts for `set_trt_dynamic_shape_info`, from the spec's yml ranges.

    Args:
        spec: the model; its `trt_dynamic_shapes` must not be empty.
        max_batch_size: when set, replaces the batch dimension of every max shape.
    """
    if not spec.trt_dynamic_shapes:
        raise EngineOptionsError(
            f"TensorRT needs dynamic shapes, but {spec.directory / 'inference.yml'} has no "
            "Hpi.backend_configs.paddle_infer.trt_dynamic_shapes"
        )
    min_shapes: dict[str, list[int]] = {}
    max_shapes: dict[str, list[int]] = {}
    opt_shapes: dict[str, list[int]] = {}
    for shape_range in spec.trt_dynamic_shapes:
        name = shape_range.input_name
        min_shapes[name] = list(shape_range.min_shape)
        opt_shapes[name] = list(shape_range.opt_shape)
        max_shapes[name] = list(shape_range.max_shape)
        if max_batch_size is not None and max_shapes[name]:
            max_shapes[name][0] = max_batch_size
    return min_shapes, max_shapes, opt_shapes


def build_config(spec: ModelSpec, options: EngineOptions, inference: ModuleType) -> Any:
    """Build a `paddle.inference.Config` the way PaddleX 3.7 does, plus our workarounds.

    Args:
        spec: the model to load.
        options: device and engine settings.
        inference: the `paddle.inference` module (tests pass a recording fake).

    Returns:
        The configured `inference.Config`.
    """
    config = inference.Config(str(spec.program_file), str(spec.params_file))
    if options.is_gpu:
        _configure_gpu(config, spec, options, inference)
    else:
        _configure_cpu(config, options)
    config.enable_new_ir(True)
    config.enable_new_executor(True)
    config.set_optimization_level(3)
    # On a PIR program this needs the new executor (3.3.1 raises "Not find predictor_id").
    config.enable_memory_optim()
    version = _inference_version(inference)
    for name in passes_to_delete(spec, options, version):
        if name not in options.delete_passes:
            logger.info(
                "deleting pass %s for %s on paddle %s (oneDNN nearest_interp bug)",
                name,
                spec.model_name,
                version,
            )
        config.delete_pass(name)
    config.disable_glog_info()
    return config


def _configure_cpu(config: Any, options: EngineOptions) -> None:
    config.disable_gpu()
    if options.enable_mkldnn:
        config.enable_mkldnn()
        config.set_mkldnn_cache_capacity(options.mkldnn_cache_capacity)
    else:
        config.disable_mkldnn()
    config.set_cpu_math_library_num_threads(options.cpu_threads)


def _configure_gpu(
    config: Any, spec: ModelSpec, options: EngineOptions, inference: ModuleType
) -> None:
    precision_type = inference.PrecisionType
    precision = precision_type.Half if options.precision == "fp16" else precision_type.Float32
    config.exp_disable_mixed_precision_ops({"feed", "fetch"})
    # CPU builds and GPU builds alike enable oneDNN by default; PaddleX turns it off on GPU.
    config.disable_mkldnn()
    if not options.use_tensorrt:
        config.enable_use_gpu(options.gpu_memory_pool_mb, options.device_id, precision)
        return
    # With TensorRT the precision applies to the engines; ops left to Paddle stay fp32 (PaddleX).
    config.enable_use_gpu(options.gpu_memory_pool_mb, options.device_id, precision_type.Float32)
    min_shapes, max_shapes, opt_shapes = trt_shape_info(spec, options.trt_max_batch_size)
    max_batch = max((shape[0] for shape in max_shapes.values() if shape), default=1)
    config.enable_tensorrt_engine(
        workspace_size=options.trt_workspace_bytes,
        max_batch_size=max_batch,
        min_subgraph_size=options.trt_min_subgraph_size,
        precision_mode=precision,
        use_static=options.trt_use_static,
        use_calib_mode=False,
    )
    config.set_trt_dynamic_shape_info(min_shapes, max_shapes, opt_shapes)
    if options.trt_cache_dir is not None:
        config.set_optim_cache_dir(options.trt_cache_dir)


def _inference_version(inference: ModuleType) -> str:
    get_version = getattr(inference, "get_version", None)
    return str(get_version()) if callable(get_version) else ""


def _import_inference() -> ModuleType:
    try:
        return importlib.import_module("paddle.inference")
    except ImportError as err:
        raise PredictorError(
            "paddlepaddle is not installed (pip install paddlepaddle==3.2.2)"
        ) from err


def paddle_version() -> str:
    """The installed paddlepaddle version, e.g. "3.2.2"."""
    paddle = importlib.import_module("paddle")
    return str(paddle.__version__)


class PaddlePredictor(SpecPredictor):
    """One Paddle Inference predictor for a single-input model; see `models.base.Predictor`.

    Not thread-safe, and `run()` holds the GIL for the whole inference: use one instance per
    process (or per thread with its own instance) and do pre/post-processing elsewhere.
    """

    def __init__(
        self,
        spec: ModelSpec,
        options: EngineOptions,
        inference: ModuleType | None = None,
    ) -> None:
        super().__init__(spec, options)
        self._inference = inference
        self._predictor: Any = None
        self._input: Any = None
        self._output: Any = None

    @property
    def loaded(self) -> bool:
        """Whether `load()` has run and `close()` has not."""
        return self._predictor is not None

    def load(self) -> None:
        """Create the predictor; a second call does nothing.

        Raises:
            PredictorError: paddle is missing, or the model cannot be loaded or has not
                exactly one input.
        """
        if self._predictor is not None:
            return
        inference = self._inference if self._inference is not None else _import_inference()
        config = build_config(self._spec, self._options, inference)
        try:
            predictor = inference.create_predictor(config)
        except Exception as err:  # Paddle raises bare RuntimeError/NotImplementedError subclasses
            raise PredictorError(
                f"cannot load {self._spec.kind} model {self._spec.directory} on "
                f"{self._options.device}: {err}"
            ) from err
        input_names = list(predictor.get_input_names())
        output_names = list(predictor.get_output_names())
        if len(input_names) != 1 or not output_names:
            raise PredictorError(
                f"{self._spec.directory}: expected one input and at least one output, got "
                f"inputs {input_names} and outputs {output_names}"
            )
        self._input = predictor.get_input_handle(input_names[0])
        self._output = predictor.get_output_handle(output_names[0])
        self._predictor = predictor
        logger.info(
            "loaded %s model=%s device=%s mkldnn=%s precision=%s trt=%s",
            self._spec.kind,
            self._spec.model_name,
            self._options.device,
            self._options.enable_mkldnn and not self._options.is_gpu,
            self._options.precision,
            self._options.use_tensorrt,
        )

    def run(self, batch: np.ndarray) -> np.ndarray:
        """Run one NCHW batch and return the first output as a new array.

        Raises:
            PredictorNotLoadedError: before `load()` or after `close()`.
            ValueError: the batch is not 4-D.
            PredictorError: Paddle failed to run the batch.
        """
        if self._predictor is None:
            raise not_loaded(self._spec)
        data = nchw_batch(batch)
        try:
            self._input.reshape(list(data.shape))
            self._input.copy_from_cpu(data)
            self._predictor.run()
            # copy_to_cpu allocates a new numpy array and copies into it (no aliasing).
            output: np.ndarray = self._output.copy_to_cpu()
        except Exception as err:  # Paddle's errors are RuntimeError/ValueError/... subclasses
            raise batch_failed(self._spec, data, err) from err
        return output

    def warmup(self) -> None:
        """Run one small zero input of a shape the model accepts."""
        self.run(np.zeros(warmup_shape(self._spec), dtype=np.float32))

    def release_memory(self) -> None:
        """Shrink the predictor's memory pool to what it holds now (`try_shrink_memory`): the
        temporary tensors of the largest input it has run. Between batches only. On the CPU
        oneDNN keeps little (after a 1600 x 1600 detector input: +94 MiB, of which this frees 10);
        on a GPU it is the device's pool."""
        if self._predictor is not None:
            self._predictor.try_shrink_memory()

    def close(self) -> None:
        """Drop the predictor and its handles; a second call does nothing."""
        self._input = None
        self._output = None
        self._predictor = None


def warmup_shape(spec: ModelSpec) -> tuple[int, int, int, int]:
    """A small input shape valid for the model (inside its TensorRT ranges, if any)."""
    if spec.rec_params is not None:
        return (1, 3, spec.rec_params.image_height, spec.rec_params.min_width)
    if spec.cls_params is not None:
        return (1, 3, spec.cls_params.image_height, spec.cls_params.image_width)
    if spec.ori_params is not None:  # a fixed 224 x 224 input
        return (1, 3, spec.ori_params.crop_px, spec.ori_params.crop_px)
    return (1, 3, 64, 64)
