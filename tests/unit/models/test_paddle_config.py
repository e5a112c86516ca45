"""Predictor configuration against a recording fake of `paddle.inference`."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from models.base import PredictorError, PredictorNotLoadedError
from models.engine_options import EngineOptions, EngineOptionsError
from models.paddle_predictor import (
    ONEDNN_PLACEMENT_PASS,
    PaddlePredictor,
    build_config,
    parse_paddle_version,
)
from models.spec import ModelSpec
from tests.fakes.paddle_inference import (
    Call,
    Precision,
    make_config_class,
    make_fake_inference,
)

pytestmark = pytest.mark.unit


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
                "precision_mode": Precision.Float32,
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
            {"memory_pool_init_size_mb": 100, "device_id": 0, "precision_mode": Precision.Half},
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
                "precision_mode": Precision.Float32,
            },
        ),
        (
            "enable_tensorrt_engine",
            {
                "workspace_size": 1 << 31,
                "max_batch_size": 8,
                "min_subgraph_size": 5,
                "precision_mode": Precision.Half,
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
    assert by_name["enable_tensorrt_engine"]["precision_mode"] == Precision.Float32
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
    fake_config = make_config_class([])
    for name, member in vars(fake_config).items():
        if name.startswith("_") or not callable(member):
            continue
        real = getattr(paddle_inference.Config, name, None)
        assert real is not None, f"paddle.inference.Config has no {name}"
        fake_params = [p for p in inspect.signature(member).parameters if p != "self"]
        assert _pybind_parameter_names(real.__doc__ or "") == fake_params, name
