"""A recording fake of `paddle.inference` (Config, predictors, handles): the Paddle predictors'
unit tests check what they ask of Paddle without Paddle's GPU build."""

from __future__ import annotations

import types
from typing import Any

import numpy as np

Call = tuple[str, dict[str, Any]]


class Precision:
    Float32 = "Precision.Float32"
    Half = "Precision.Half"


def make_config_class(calls: list[Call]) -> type:
    """A Config whose methods mirror the 3.3.1 pybind signatures and record bound arguments."""

    class FakeConfig:
        def __init__(self, prog_file: str, params_file: str) -> None:
            self._record("Config", prog_file=prog_file, params_file=params_file)

        def _record(self, name: str, **arguments: Any) -> None:
            calls.append((name, arguments))

        def disable_gpu(self) -> None:
            self._record("disable_gpu")

        def enable_mkldnn(self) -> None:
            self._record("enable_mkldnn")

        def disable_mkldnn(self) -> None:
            self._record("disable_mkldnn")

        def set_mkldnn_cache_capacity(self, capacity: int = 0) -> None:
            self._record("set_mkldnn_cache_capacity", capacity=capacity)

        def set_cpu_math_library_num_threads(self, arg0: int) -> None:
            self._record("set_cpu_math_library_num_threads", arg0=arg0)

        def enable_new_ir(self, x: bool = True) -> None:
            self._record("enable_new_ir", x=x)

        def enable_new_executor(self, x: bool = True) -> None:
            self._record("enable_new_executor", x=x)

        def set_optimization_level(self, opt_level: int = 2) -> None:
            self._record("set_optimization_level", opt_level=opt_level)

        def enable_memory_optim(self, x: bool = True) -> None:
            self._record("enable_memory_optim", x=x)

        def delete_pass(self, arg0: str) -> None:
            self._record("delete_pass", arg0=arg0)

        def disable_glog_info(self) -> None:
            self._record("disable_glog_info")

        def exp_disable_mixed_precision_ops(self, arg0: set[str]) -> None:
            self._record("exp_disable_mixed_precision_ops", arg0=set(arg0))

        def enable_use_gpu(
            self,
            memory_pool_init_size_mb: int,
            device_id: int = 0,
            precision_mode: str = Precision.Float32,
        ) -> None:
            self._record(
                "enable_use_gpu",
                memory_pool_init_size_mb=memory_pool_init_size_mb,
                device_id=device_id,
                precision_mode=precision_mode,
            )

        def enable_tensorrt_engine(
            self,
            workspace_size: int = 1 << 30,
            max_batch_size: int = 1,
            min_subgraph_size: int = 3,
            precision_mode: str = Precision.Float32,
            use_static: bool = False,
            use_calib_mode: bool = True,
            use_cuda_graph: bool = False,
        ) -> None:
            self._record(
                "enable_tensorrt_engine",
                workspace_size=workspace_size,
                max_batch_size=max_batch_size,
                min_subgraph_size=min_subgraph_size,
                precision_mode=precision_mode,
                use_static=use_static,
                use_calib_mode=use_calib_mode,
                use_cuda_graph=use_cuda_graph,
            )

        def set_trt_dynamic_shape_info(
            self,
            min_input_shape: dict[str, list[int]] | None = None,
            max_input_shape: dict[str, list[int]] | None = None,
            optim_input_shape: dict[str, list[int]] | None = None,
            disable_trt_plugin_fp16: bool = False,
        ) -> None:
            self._record(
                "set_trt_dynamic_shape_info",
                min_input_shape=min_input_shape,
                max_input_shape=max_input_shape,
                optim_input_shape=optim_input_shape,
                disable_trt_plugin_fp16=disable_trt_plugin_fp16,
            )

        def set_optim_cache_dir(self, arg0: str) -> None:
            self._record("set_optim_cache_dir", arg0=arg0)

    return FakeConfig


class FakeHandle:
    def __init__(self, calls: list[Call], name: str) -> None:
        self._calls = calls
        self._name = name
        self.data: np.ndarray | None = None

    def reshape(self, shape: list[int]) -> None:
        self._calls.append(("reshape", {"name": self._name, "shape": shape}))

    def copy_from_cpu(self, data: np.ndarray) -> None:
        self._calls.append(("copy_from_cpu", {"name": self._name, "dtype": data.dtype}))
        self.data = data

    def copy_to_cpu(self) -> np.ndarray:
        self._calls.append(("copy_to_cpu", {"name": self._name}))
        assert self.data is not None
        return self.data * 2.0


class FakeEngine:
    def __init__(self, calls: list[Call], input_names: list[str]) -> None:
        self._calls = calls
        self._input_names = input_names
        self._input = FakeHandle(calls, input_names[0])
        self._output = FakeHandle(calls, "out")

    def get_input_names(self) -> list[str]:
        return self._input_names

    def get_output_names(self) -> list[str]:
        return ["out", "out2"]

    def get_input_handle(self, name: str) -> FakeHandle:
        self._calls.append(("get_input_handle", {"name": name}))
        return self._input

    def get_output_handle(self, name: str) -> FakeHandle:
        self._calls.append(("get_output_handle", {"name": name}))
        return self._output

    def run(self) -> None:
        self._calls.append(("run", {}))
        self._output.data = self._input.data


def make_fake_inference(
    version: str = "3.2.2",
    *,
    input_names: tuple[str, ...] = ("x",),
    fail_create: bool = False,
) -> tuple[types.ModuleType, list[Call]]:
    """A stand-in for `paddle.inference` and the list every call is recorded into."""
    calls: list[Call] = []
    module = types.ModuleType("fake_paddle_inference")
    module.Config = make_config_class(calls)  # type: ignore[attr-defined]
    module.PrecisionType = Precision  # type: ignore[attr-defined]
    module.get_version = lambda: f"version: {version}\ncommit: 0000000\nbranch: HEAD\n"  # type: ignore[attr-defined]

    def create_predictor(config: Any) -> FakeEngine:
        calls.append(("create_predictor", {}))
        if fail_create:
            raise RuntimeError("(NotFound) boom")
        return FakeEngine(calls, list(input_names))

    module.create_predictor = create_predictor  # type: ignore[attr-defined]
    return module, calls
