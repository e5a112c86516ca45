"""OpenVINO as an engine backend for CPU device workers (the `openvino` extra).

Serves a model directory's `inference.onnx`, or a Paddle model's cached conversion
(`models.convert`): OpenVINO cannot read Paddle's PIR `inference.json`.

Precision follows `[engine] openvino_precision`, resolved per CPU and model when the model
loads (`models.openvino_precision`), from what this CPU's precision check found for it
(`EngineOptions.openvino_verdict`, given before the load: `serving.engine.precision_check`):
"auto" is bf16 where the check passed it, faster and changing some recognised text, else f32;
"f32" reads what Paddle reads; "int8" serves NNCF's int8 form of each model (`models.quantize`,
made offline by `make convert-int8`) where the check passed it. Threads come from
`[engine] cpu_threads`, one stream, the latency hint; inputs of any batch, height and width.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from models.base import not_loaded
from models.engine_options import EngineOptions, OpenVinoPrecision
from models.onnx_predictor import BatchRunner, OnnxPredictor, cpu_onnx_backend, import_engine
from models.openvino_layout import SplitModel, chained, split_at_head, with_argmax
from models.openvino_precision import (
    CHECKED_KINDS,
    PrecisionChoice,
    choose_precision,
    effective_capabilities,
)
from models.precision_verdict import ModelCheck
from models.quantize import RECIPES, int8_model
from models.spec import ModelSpec
from pipelines.rec_postprocess import argmax_pairs

logger = logging.getLogger(__name__)


def cpu_capabilities(core: Any, options: EngineOptions) -> list[str]:
    """The CPU's `OPTIMIZATION_CAPABILITIES` from OpenVINO's `core` as the precision policy
    reads them: less bf16 where `options.openvino_bf16` takes it as absent
    (`engine.openvino_bf16`)."""
    probed = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return effective_capabilities(probed, options.openvino_bf16)


def compile_config(options: EngineOptions, precision: OpenVinoPrecision) -> dict[str, Any]:
    """`compile_model` properties for one CPU predictor, at `precision` (as chosen for it).

    The CPU plugin keeps compiled state for the input shapes it has seen, in a large cache by
    default: with pages of ever new sizes the detector grew ~4 MiB a shape (`make soak`: the
    device worker +640 MiB in 10 minutes), and stayed flat with the cache bounded to 5. The
    bound is oneDNN's (`engine.mkldnn_cache_capacity`; 0 = OpenVINO's default).

    Threads are not pinned to cores: each process would pin its own threads from core 0 up,
    not knowing of the others, so two 1-thread device workers (`workers.cpu_instances = 2`)
    shared one core and ran at half speed (python, 2 processes x 1-thread detector on this
    2-core machine: 2.03 s pinned, 1.11 s not, for 6 runs each), and the CPU workers'
    pre- and post-processing meets pinned threads too.
    """
    config: dict[str, Any] = {
        "INFERENCE_NUM_THREADS": options.cpu_threads,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
        # An int8 model runs its quantised operations in int8 and the rest at f32.
        "INFERENCE_PRECISION_HINT": "f32" if precision == "int8" else precision,
        "ENABLE_CPU_PINNING": False,
    }
    if options.mkldnn_cache_capacity > 0:
        config["CPU_RUNTIME_CACHE_CAPACITY"] = options.mkldnn_cache_capacity
    return config


class OpenVinoPredictor(OnnxPredictor):
    """One OpenVINO compiled model and infer request on the CPU plugin."""

    engine = "openvino"
    precision: PrecisionChoice | None = None
    """The precision the loaded model runs at, and why; None before `load()`."""
    model_file: Path | None = None
    """The file the loaded model came from (the ONNX model, or its int8 form); None before
    `load()`."""

    def __init__(self, spec: ModelSpec, options: EngineOptions) -> None:
        super().__init__(spec, options)
        self._alone: BatchRunner | None = None
        """The model compiled for `lone_threads` (`run_alone`); None where there is none."""
        self._releases: list[Callable[[], None]] = []
        """Each compiled model's `release_memory`."""
        self.threads: tuple[int, ...] = ()
        """Each compiled model's threads, as OpenVINO reports them: `run`'s, then `run_alone`'s
        where it has its own model; empty before `load()`."""
        self._argmax = False
        """Answer the argmax pairs of the output's last axis (`output_argmax`)."""
        self._reduce_here = False
        """`_argmax`, by numpy here: the compiled model answers the full output."""

    def output_argmax(self) -> None:
        """From now on, answer each batch with the (..., 2) argmax pairs of the model's output
        (`models.base.ArgmaxOutput`): computed in the compiled model where its last layers run
        at f32 or int8's f32 (`models.openvino_layout.with_argmax`: exact, and the full output
        never leaves the engine), else from the output by numpy. Asked for before `load()`, the
        model compiles once; after, it is compiled again."""
        if self._argmax:
            return
        self._argmax = True
        if self.loaded:
            self.close()
            self.load()

    @property
    def argmax_in_graph(self) -> bool:
        """Whether the loaded model's runner answers argmax pairs itself (`output_argmax`, the
        reduction compiled into the graph): a runner put in its place must too
        (`replace_runner`)."""
        return self._argmax and not self._reduce_here

    def use_verdict(self, check: ModelCheck) -> None:
        """Compile at what this CPU's precision check found for the model
        (`serving.engine.precision_check`); before `load()`, which reads it."""
        self._options = dataclasses.replace(self._options, openvino_verdict=check)

    def _open(self) -> BatchRunner:
        ov = import_engine("openvino", "openvino")
        core = ov.Core()
        capabilities = cpu_capabilities(core, self.options)
        setting = self.options.openvino_precision
        if setting == "int8" and self.spec.kind in CHECKED_KINDS:
            int8_model(self.spec, Path(self.options.onnx_dir))  # asked for: it must be made
        choice = choose_precision(
            setting,
            capabilities,
            self.spec.model_name,
            self.spec.kind,
            f32_head=self.options.openvino_f32_head,
            checked=self.options.openvino_check,
            check=self.options.openvino_verdict,
        )
        if choice.precision == "int8" and self.spec.kind not in RECIPES:
            # The page classifier (and any kind without a recipe) has no int8 form: it runs f32.
            choice = PrecisionChoice(
                "f32", f"{choice.reason}; {self.spec.kind} models have no int8 recipe: f32"
            )
        path = self.onnx_file
        if choice.precision == "int8":
            path = int8_model(self.spec, Path(self.options.onnx_dir))
        model = core.read_model(str(path))
        self.model_file = path
        if len(model.inputs) != 1 or not model.outputs:
            raise ValueError(f"expected one input and at least one output, got {model.inputs}")
        config = compile_config(self.options, choice.precision)
        split = split_at_head(ov, str(path)) if choice.f32_head else None
        if choice.f32_head and split is None:
            choice = PrecisionChoice("bf16", f"{choice.reason}; no CTC head to keep in f32")
        # The reduction joins the graph only where it runs at f32 (the head of a split model,
        # an f32 or int8 model): bf16 cannot hold its class numbers.
        reduced = self._argmax and (split is not None or choice.precision != "bf16")
        if reduced and split is not None:
            split = SplitModel(body=split.body, head=with_argmax(ov, split.head), cut=split.cut)
        elif reduced:
            model = with_argmax(ov, model)
        self._reduce_here = self._argmax and not reduced
        compiled = core.compile_model(split.body if split else model, "CPU", config)
        self.precision = compiled_precision(
            choice, compiled.get_property("INFERENCE_PRECISION_HINT")
        )
        self._releases = []
        self._alone = None
        self.threads = ()
        run = self._compiled(core, compiled, split, config)
        alone = ""
        if self.options.lone_threads > self.options.cpu_threads:
            # The same model compiled for more threads: the weights are small (PP-OCRv5 mobile's
            # 5 and 16 MB), working memory is allocated per input shape as the model runs.
            wide_config = {**config, "INFERENCE_NUM_THREADS": self.options.lone_threads}
            wide = core.compile_model(split.body if split else model, "CPU", wide_config)
            self._alone = self._compiled(core, wide, split, wide_config)
            alone = f" ({self.options.lone_threads} alone)"
        logger.info(
            "loaded %s model=%s (%s) engine=openvino %s threads=%d%s precision=%s (%s) layers: %s",
            self.spec.kind,
            self.spec.model_name,
            path,
            ov.get_version(),
            self.options.cpu_threads,
            alone,
            self.precision.precision,
            self.precision.reason,
            self.precision.layers,
        )
        return run

    def _compiled(
        self, core: Any, compiled: Any, split: SplitModel | None, config: dict[str, Any]
    ) -> BatchRunner:
        """A runner for `compiled` (the whole model, or `split`'s body, whose head is compiled
        here at f32 with the same threads), its threads and memory release recorded."""
        self._releases.append(compiled.release_memory)
        self.threads += (int(compiled.get_property("INFERENCE_NUM_THREADS")),)
        if split is None:
            return _runner(compiled.create_infer_request())
        head = core.compile_model(split.head, "CPU", {**config, "INFERENCE_PRECISION_HINT": "f32"})
        self._releases.append(head.release_memory)
        return chained(compiled.create_infer_request(), head.create_infer_request())

    def run_alone(self, batch: np.ndarray) -> np.ndarray:
        """`run` on `lone_threads` threads: the model compiled for them where they are more than
        `cpu_threads`, else the model `run` uses (`models.base.AloneRunner`).

        Raises:
            PredictorNotLoadedError: before `load()` or after `close()`.
            ValueError: the batch is not 4-D.
            PredictorError: the engine failed on the batch.
        """
        alone = self._alone if self.loaded else None
        return self._answer(self._run_with(alone or self._run, batch))

    def run(self, batch: np.ndarray) -> np.ndarray:
        """Run one NCHW batch: the model's first output as a new array, or its argmax pairs
        (`output_argmax`).

        Raises:
            PredictorNotLoadedError: before `load()` or after `close()`.
            ValueError: the batch is not 4-D.
            PredictorError: the engine failed on the batch.
        """
        return self._answer(self._run_with(self._run, batch))

    def _answer(self, output: np.ndarray) -> np.ndarray:
        """The output, or its argmax pairs where the compiled model does not reduce it."""
        return argmax_pairs(output) if self._reduce_here else output

    def replace_runner(self, make: Callable[[BatchRunner], BatchRunner]) -> BatchRunner:
        """Run batches with `make(runner)` from now on, `runner` being the one in use; returns
        that one. For measurements that try variants of a loaded model
        (`loadtest.bench.int8_sensitivity`: `compile_runner` of an int8 recogniser with layers
        put back in float); the model compiled for lone batches goes, so `run_alone` runs the
        new runner too.

        Raises:
            PredictorNotLoadedError: before `load()` or after `close()`.
        """
        if self._run is None:
            raise not_loaded(self.spec)
        current = self._run
        self._run = make(current)
        self._alone = None
        return current

    def close(self) -> None:
        """Drop both compiled models; a second call does nothing."""
        super().close()
        self._alone = None
        self._releases = []
        self.threads = ()

    def release_memory(self) -> None:
        """Free the working memory the CPU plugin keeps for the largest input it has run.

        It keeps it until the model is closed: after one 4000 x 4000 detector input a worker
        held +2.6 GiB while idle; `CompiledModel.release_memory` gives it back (after 2048 x
        2048: 803 -> 243 MiB, in 0.05 s), and the next input allocates for its own shape. Call
        it between batches, never while one runs.
        """
        if self.loaded:
            for release in self._releases:
                release()


def compile_runner(model: Any, options: EngineOptions, precision: OpenVinoPrecision) -> BatchRunner:
    """`model` (an `openvino.Model`, read or built in this process) compiled on the CPU as a
    predictor with `options` compiles its own at `precision` (`compile_config`), as a runner of
    batches (`OpenVinoPredictor.replace_runner`)."""
    ov = import_engine("openvino", "openvino")
    compiled = ov.Core().compile_model(model, "CPU", compile_config(options, precision))
    return _runner(compiled.create_infer_request())


def _runner(request: Any) -> BatchRunner:
    """Runs one batch on an OpenVINO infer request, copying the output out."""

    def run(data: np.ndarray) -> np.ndarray:
        request.infer({0: data})
        # The output tensor's memory belongs to the request and is reused: copy it.
        return np.array(request.get_output_tensor(0).data, copy=True)

    return run


def compiled_precision(choice: PrecisionChoice, hint: object) -> PrecisionChoice:
    """What a model compiled for `choice` runs at, from its INFERENCE_PRECISION_HINT (an
    `openvino.Type`, read through its name): `choice`, or, where OpenVINO compiled another
    precision than the one chosen, that one, saying so. An int8 model's hint reads f32 (its
    float operations'): it runs int8."""
    name = str(getattr(hint, "type_name", hint))
    if choice.precision == "int8" and name in ("f32", "float32"):
        return choice
    precision: OpenVinoPrecision = "bf16" if name in ("bf16", "bfloat16") else "f32"
    if precision == choice.precision:
        return choice
    logger.warning(
        "OpenVINO compiled %s where %s was chosen (%s)", name, choice.precision, choice.reason
    )
    return PrecisionChoice(precision, f"{choice.reason}; OpenVINO compiled {name}")


OPENVINO = cpu_onnx_backend(OpenVinoPredictor)
"""OpenVINO (CPU plugin) on ONNX models and Paddle models' conversions."""
