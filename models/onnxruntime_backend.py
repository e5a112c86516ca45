"""ONNX Runtime as an engine backend for CPU device workers (the `onnxruntime` extra).

Serves a model directory's `inference.onnx`, or a Paddle model's cached conversion
(`models.convert`). Intra-op threads come from `[engine] cpu_threads`; inputs of any batch,
height and width (the converted models' dimensions are dynamic).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from models.engine_options import EngineOptions
from models.onnx_predictor import BatchRunner, OnnxPredictor, cpu_onnx_backend, import_engine

logger = logging.getLogger(__name__)


def session_options(ort: Any, options: EngineOptions) -> Any:
    """`onnxruntime.SessionOptions` for one CPU predictor: `cpu_threads` intra-op threads, one
    inter-op thread, sequential execution, every graph optimisation."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = options.cpu_threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3  # errors only: warnings about unused initialisers are noise
    return so


class OnnxRuntimePredictor(OnnxPredictor):
    """One ONNX Runtime session on the CPU execution provider."""

    engine = "onnxruntime"

    def _open(self) -> BatchRunner:
        ort = import_engine("onnxruntime", "onnxruntime")
        session = ort.InferenceSession(
            str(self.onnx_file),
            session_options(ort, self.options),
            providers=["CPUExecutionProvider"],
        )
        inputs = session.get_inputs()
        outputs = session.get_outputs()
        if len(inputs) != 1 or not outputs:
            raise ValueError(f"expected one input and at least one output, got {len(inputs)}")
        input_name, output_name = inputs[0].name, outputs[0].name
        logger.info(
            "loaded %s model=%s engine=onnxruntime %s threads=%d",
            self.spec.kind,
            self.spec.model_name,
            ort.__version__,
            self.options.cpu_threads,
        )

        def run(data: np.ndarray) -> np.ndarray:
            # run() returns arrays the session no longer references.
            output: np.ndarray = session.run([output_name], {input_name: data})[0]
            return output

        return run


ONNXRUNTIME = cpu_onnx_backend(OnnxRuntimePredictor)
"""ONNX Runtime (CPU execution provider) on ONNX models and Paddle models' conversions."""
