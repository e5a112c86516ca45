"""Predictor configuration against a recording fake of `paddle.inference`."""

from __future__ import annotations

import inspect
import re
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.base import PredictorError, PredictorNotLoadedError
from models.embedded import embedded_model_dir
from models.engine_options import EngineOptions, EngineOptionsError
from models.paddle_predictor import (
    ONEDNN_PLACEMENT_PASS,
    PaddlePredictor,
    build_config,
    parse_paddle_version,
)
from models.spec import ModelSpec, load_model_spec

pytestmark = pytest.mark.unit

Call = tuple[str, dict[str, Any]]


class _Precision:
    Float32 = "Precision.Float32"
    Half = "Precision.Half"


def _make_config_class(calls: list[Call]) -> type:
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
            precision_mode: str = _Precision.Float32,
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
            precision_mode: str = _Precision.Float32,
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


class _FakeHandle:
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


class _FakeEngine:
    def __init__(self, calls: list[Call], input_names: list[str]) -> None:
        self._calls = calls
        self._input_names = input_names
        self._input = _FakeHandle(calls, input_names[0])
        self._output = _FakeHandle(calls, "out")

    def get_input_names(self) -> list[str]:
        return self._input_names

    def get_output_names(self) -> list[str]:
        return ["out", "out2"]

    def get_input_handle(self, name: str) -> _FakeHandle:
        self._calls.append(("get_input_handle", {"name": name}))
        return self._input

    def get_output_handle(self, name: str) -> _FakeHandle:
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
    module.Config = _make_config_class(calls)  # type: ignore[attr-defined]
    module.PrecisionType = _Precision  # type: ignore[attr-defined]
    module.get_version = lambda: f"version: {version}\ncommit: 0000000\nbranch: HEAD\n"  # type: ignore[attr-defined]

    def create_predictor(config: Any) -> _FakeEngine:
        calls.append(("create_predictor", {}))
        if fail_create:
            raise RuntimeError("(NotFound) boom")
        return _FakeEngine(calls, list(input_names))

    module.create_predictor = create_predictor  # type: ignore[attr-defined]
    return module, calls


@pytest.fixture(scope="module")
def det_spec() -> ModelSpec:
    return load_model_spec(embedded_model_dir("PP-OCRv5_mobile_det"), "det")


@pytest.fixture(scope="module")
def rec_spec() -> ModelSpec:
    return load_model_spec(embedded_model_dir("PP-OCRv5_mobile_rec"), "rec")


def _config_call(spec: ModelSpec) -> Call:
    return ("Config", {"prog_file": str(spec.program_file), "params_file": str(spec.params_file)})


TAIL: list[Call] = [
    ("enable_new_ir", {"x": True}),
    ("enable_new_executor", {"x": True}),
    ("set_optimization_level", {"opt_level": 3}),
    ("enable_memory_optim", {"x": True}),
]


def test_cpu_with_mkldnn(det_spec: ModelSpec) -> None:
    inference, calls = make_fake_inference("3.2.2")
    build_config(det_spec, EngineOptions(cpu_threads=2, enable_mkldnn=True), inference)
    assert calls == [
        _config_call(det_spec),
        ("disable_gpu", {}),
        ("enable_mkldnn", {}),
        ("set_mkldnn_cache_capacity", {"capacity": 10}),
        ("set_cpu_math_library_num_threads", {"arg0": 2}),
        *TAIL,
        ("disable_glog_info", {}),
    ]


def test_cpu_without_mkldnn_and_configured_passes(rec_spec: ModelSpec) -> None:
    inference, calls = make_fake_inference("3.3.1")
    options = EngineOptions(
        cpu_threads=3,
        enable_mkldnn=False,
        delete_passes=("matmul_add_act_fuse_pass", "conv2d_add_fuse_pass"),
    )
    build_config(rec_spec, options, inference)
    assert calls == [
        _config_call(rec_spec),
        ("disable_gpu", {}),
        ("disable_mkldnn", {}),
        ("set_cpu_math_library_num_threads", {"arg0": 3}),
        *TAIL,
        ("delete_pass", {"arg0": "matmul_add_act_fuse_pass"}),
        ("delete_pass", {"arg0": "conv2d_add_fuse_pass"}),
        ("disable_glog_info", {}),
    ]


def test_mkldnn_cache_capacity_is_passed(det_spec: ModelSpec) -> None:
    inference, calls = make_fake_inference("3.2.2")
    build_config(det_spec, EngineOptions(mkldnn_cache_capacity=3), inference)
    assert ("set_mkldnn_cache_capacity", {"capacity": 3}) in calls


@pytest.mark.parametrize("version", ["3.3.0", "3.3.1", "3.3.1.post1"])
def test_paddle_33_det_with_mkldnn_deletes_onednn_placement_pass(
    det_spec: ModelSpec, version: str
) -> None:
    inference, calls = make_fake_inference(version)
    build_config(det_spec, EngineOptions(cpu_threads=2), inference)
    assert calls[-2:] == [
        ("delete_pass", {"arg0": ONEDNN_PLACEMENT_PASS}),
        ("disable_glog_info", {}),
    ]
    assert calls[-3] == ("enable_memory_optim", {"x": True})


def test_paddle_33_workaround_is_not_duplicated(det_spec: ModelSpec) -> None:
    inference, calls = make_fake_inference("3.3.1")
    options = EngineOptions(delete_passes=(ONEDNN_PLACEMENT_PASS, "other_pass"))
    build_config(det_spec, options, inference)
    deleted = [args["arg0"] for name, args in calls if name == "delete_pass"]
    assert deleted == [ONEDNN_PLACEMENT_PASS, "other_pass"]


def test_paddle_33_workaround_can_be_switched_off(det_spec: ModelSpec) -> None:
    inference, calls = make_fake_inference("3.3.1")
    build_config(det_spec, EngineOptions(auto_delete_passes=False), inference)
    assert not [c for c in calls if c[0] == "delete_pass"]


@pytest.mark.parametrize(
    ("version", "kind", "mkldnn"),
    [
        ("3.2.2", "det", True),  # 3.2.2 has no bug
        ("3.3.1", "rec", True),  # rec has no nearest_interp
        ("3.3.1", "det", False),  # no oneDNN, nothing to work around
    ],
)
def test_no_automatic_pass_deletion(
    det_spec: ModelSpec, rec_spec: ModelSpec, version: str, kind: str, mkldnn: bool
) -> None:
    spec = det_spec if kind == "det" else rec_spec
    inference, calls = make_fake_inference(version)
    build_config(spec, EngineOptions(enable_mkldnn=mkldnn), inference)
    assert not [c for c in calls if c[0] == "delete_pass"]


def test_gpu_fp32(det_spec: ModelSpec) -> None:
    inference, calls = make_fake_inference("3.3.1")
    build_config(det_spec, EngineOptions(device="gpu:1", gpu_memory_pool_mb=256), inference)
    assert calls == [
        _config_call(det_spec),
        ("exp_disable_mixed_precision_ops", {"arg0": {"feed", "fetch"}}),
        ("disable_mkldnn", {}),
        (
            "enable_use_gpu",
            {
                "memory_pool_init_size_mb": 256,
                "device_id": 1,
                "precision_mode": _Precision.Float32,
            },
        ),
        *TAIL,
        ("disable_glog_info", {}),
    ]


def test_gpu_fp16(rec_spec: ModelSpec) -> None:
    inference, calls = make_fake_inference("3.2.2")
    build_config(rec_spec, EngineOptions(device="gpu:0", precision="fp16"), inference)
    assert calls == [
        _config_call(rec_spec),
        ("exp_disable_mixed_precision_ops", {"arg0": {"feed", "fetch"}}),
        ("disable_mkldnn", {}),
        (
            "enable_use_gpu",
            {"memory_pool_init_size_mb": 100, "device_id": 0, "precision_mode": _Precision.Half},
        ),
        *TAIL,
        ("disable_glog_info", {}),
    ]


def test_gpu_tensorrt_with_dynamic_shapes_from_yml(rec_spec: ModelSpec) -> None:
    inference, calls = make_fake_inference("3.3.1")
    options = EngineOptions(
        device="gpu:0",
        precision="fp16",
        use_tensorrt=True,
        trt_workspace_bytes=1 << 31,
        trt_min_subgraph_size=5,
        trt_use_static=True,
        trt_cache_dir="/var/cache/ocr/trt",
    )
    build_config(rec_spec, options, inference)
    assert calls == [
        _config_call(rec_spec),
        ("exp_disable_mixed_precision_ops", {"arg0": {"feed", "fetch"}}),
        ("disable_mkldnn", {}),
        (
            "enable_use_gpu",
            {
                "memory_pool_init_size_mb": 100,
                "device_id": 0,
                "precision_mode": _Precision.Float32,
            },
        ),
        (
            "enable_tensorrt_engine",
            {
                "workspace_size": 1 << 31,
                "max_batch_size": 8,
                "min_subgraph_size": 5,
                "precision_mode": _Precision.Half,
                "use_static": True,
                "use_calib_mode": False,
                "use_cuda_graph": False,
            },
        ),
        (
            "set_trt_dynamic_shape_info",
            {
                # PP-OCRv5_mobile_rec inference.yml: [min, opt, max] = 160 / 320 / 3200 wide.
                "min_input_shape": {"x": [1, 3, 48, 160]},
                "max_input_shape": {"x": [8, 3, 48, 3200]},
                "optim_input_shape": {"x": [1, 3, 48, 320]},
                "disable_trt_plugin_fp16": False,
            },
        ),
        ("set_optim_cache_dir", {"arg0": "/var/cache/ocr/trt"}),
        *TAIL,
        ("disable_glog_info", {}),
    ]


def test_tensorrt_max_batch_override(rec_spec: ModelSpec) -> None:
    inference, calls = make_fake_inference("3.3.1")
    options = EngineOptions(device="gpu:0", use_tensorrt=True, trt_max_batch_size=32)
    build_config(rec_spec, options, inference)
    by_name = dict(calls)
    assert by_name["enable_tensorrt_engine"]["max_batch_size"] == 32
    assert by_name["enable_tensorrt_engine"]["precision_mode"] == _Precision.Float32
    assert by_name["set_trt_dynamic_shape_info"]["max_input_shape"] == {"x": [32, 3, 48, 3200]}
    assert by_name["set_trt_dynamic_shape_info"]["min_input_shape"] == {"x": [1, 3, 48, 160]}
    assert "set_optim_cache_dir" not in by_name


def test_tensorrt_without_shapes_is_an_error(tmp_path: Path, rec_spec: ModelSpec) -> None:
    spec = ModelSpec(
        kind="rec",
        model_name="no-hpi",
        directory=tmp_path,
        program_file=rec_spec.program_file,
        params_file=rec_spec.params_file,
        rec_params=rec_spec.rec_params,
        character_dict=("a",),
    )
    inference, _ = make_fake_inference()
    with pytest.raises(EngineOptionsError, match="trt_dynamic_shapes"):
        build_config(spec, EngineOptions(device="gpu:0", use_tensorrt=True), inference)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3.3.1", (3, 3)),
        ("version: 3.2.2\ncommit: d90d3ad\n", (3, 2)),
        ("0.0.0", (0, 0)),
        ("garbage", (0, 0)),
    ],
)
def test_parse_paddle_version(text: str, expected: tuple[int, int]) -> None:
    assert parse_paddle_version(text) == expected


def test_predictor_lifecycle_with_fake_engine(rec_spec: ModelSpec) -> None:
    inference, calls = make_fake_inference("3.2.2")
    predictor = PaddlePredictor(rec_spec, EngineOptions(cpu_threads=1), inference)
    assert calls == []  # no work in __init__
    with pytest.raises(PredictorNotLoadedError):
        predictor.run(np.zeros((1, 3, 48, 320), np.float32))
    predictor.load()
    predictor.load()  # idempotent
    assert sum(1 for name, _ in calls if name == "create_predictor") == 1
    calls.clear()
    batch = np.ones((2, 3, 48, 320), dtype=np.float64)
    out = predictor.run(batch)
    assert [name for name, _ in calls] == ["reshape", "copy_from_cpu", "run", "copy_to_cpu"]
    assert calls[0][1] == {"name": "x", "shape": [2, 3, 48, 320]}
    assert calls[1][1]["dtype"] == np.float32
    assert out.shape == (2, 3, 48, 320)
    assert float(out[0, 0, 0, 0]) == 2.0
    with pytest.raises(ValueError, match="NCHW"):
        predictor.run(np.zeros((3, 48, 320), np.float32))
    predictor.close()
    predictor.close()
    assert not predictor.loaded
    with pytest.raises(PredictorNotLoadedError):
        predictor.warmup()


def test_predictor_warmup_shape(rec_spec: ModelSpec) -> None:
    inference, calls = make_fake_inference("3.2.2")
    predictor = PaddlePredictor(rec_spec, EngineOptions(), inference)
    predictor.load()
    predictor.warmup()
    assert ("reshape", {"name": "x", "shape": [1, 3, 48, 320]}) in calls


def test_predictor_load_failure_is_wrapped(det_spec: ModelSpec) -> None:
    inference, _ = make_fake_inference(fail_create=True)
    predictor = PaddlePredictor(det_spec, EngineOptions(), inference)
    with pytest.raises(PredictorError, match="cannot load det model"):
        predictor.load()
    assert not predictor.loaded


def test_predictor_rejects_multi_input_models(det_spec: ModelSpec) -> None:
    inference, _ = make_fake_inference(input_names=("x", "scale"))
    with pytest.raises(PredictorError, match="one input"):
        PaddlePredictor(det_spec, EngineOptions(), inference).load()


def _pybind_parameter_names(doc: str) -> list[str]:
    signature = doc.strip().splitlines()[0]
    inner = signature[signature.index("(") + 1 : signature.rindex(")")]
    return [name for name in re.findall(r"(?:^|, )(\w+):", inner) if name != "self"]


def test_fake_config_mirrors_the_installed_paddle_api() -> None:
    """Every method the fake offers exists in the installed Paddle with the same parameters."""
    paddle_inference = pytest.importorskip("paddle.inference")
    fake_config = _make_config_class([])
    for name, member in vars(fake_config).items():
        if name.startswith("_") or not callable(member):
            continue
        real = getattr(paddle_inference.Config, name, None)
        assert real is not None, f"paddle.inference.Config has no {name}"
        fake_params = [p for p in inspect.signature(member).parameters if p != "self"]
        assert _pybind_parameter_names(real.__doc__ or "") == fake_params, name
