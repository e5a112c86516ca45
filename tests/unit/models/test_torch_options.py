"""The torch engine's shape buckets and settings (`models.torch_options`, `[engine.torch]`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.engine_options import EngineOptions, EngineOptionsError
from models.torch_options import TorchOptions, batch_bucket, bucket_shape, rec_buckets
from serving.config import build, load_config
from serving.errors import ConfigError

BUCKETS = TorchOptions(shapes="buckets", rec_widths_px=(320, 640), det_step_px=128)


def test_exact_shapes_run_as_they_come() -> None:
    for kind in ("det", "cls", "rec"):
        assert bucket_shape(kind, (3, 3, 48, 333), TorchOptions()) == (3, 3, 48, 333)


def test_batches_round_up_to_powers_of_two_then_steps_of_16() -> None:
    assert [batch_bucket(n) for n in (1, 2, 3, 5, 17, 32, 33, 90, 96, 97)] == [
        1,
        2,
        4,
        8,
        32,
        32,
        48,
        96,
        96,
        112,
    ]


def test_rec_pads_width_to_its_bucket_and_keeps_wider_batches() -> None:
    assert bucket_shape("rec", (5, 3, 48, 321), BUCKETS) == (8, 3, 48, 640)
    assert bucket_shape("rec", (1, 3, 48, 320), BUCKETS) == (1, 3, 48, 320)
    assert bucket_shape("rec", (1, 3, 48, 700), BUCKETS) == (1, 3, 48, 700)
    rows_only = TorchOptions(shapes="buckets", rec_widths_px=())  # Paddle's text, measured
    assert bucket_shape("rec", (5, 3, 48, 321), rows_only) == (8, 3, 48, 321)


def test_det_rounds_height_and_width_and_cls_only_rows() -> None:
    assert bucket_shape("det", (1, 3, 736, 960), BUCKETS) == (1, 3, 768, 1024)
    assert bucket_shape("cls", (3, 3, 80, 160), BUCKETS) == (4, 3, 80, 160)


def test_rec_buckets_list_every_width_and_row_bucket() -> None:
    assert rec_buckets(BUCKETS, height=48, max_batch=3) == [
        (1, 3, 48, 320),
        (2, 3, 48, 320),
        (4, 3, 48, 320),
        (1, 3, 48, 640),
        (2, 3, 48, 640),
        (4, 3, 48, 640),
    ]


def test_engine_options_refuse_unsorted_widths() -> None:
    with pytest.raises(EngineOptionsError, match="rec_widths_px"):
        EngineOptions(torch=TorchOptions(rec_widths_px=(640, 320)))


def test_config_reads_engine_torch_and_names_the_key_it_refuses(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[engine.torch]\ncompile = "reduce-overhead"\nshapes = "buckets"\n'
        "rec_widths_px = [320, 960]\ndet_step_px = 64\n"
    )
    torch = load_config(path).engine.torch
    assert torch == TorchOptions(
        compile="reduce-overhead", shapes="buckets", rec_widths_px=(320, 960), det_step_px=64
    )
    with pytest.raises(ConfigError, match=r"engine\.torch\.det_step_px"):
        build(type(load_config(None)), {"engine": {"torch": {"det_step_px": 0}}})
    with pytest.raises(ConfigError, match=r"engine\.torch\.compile"):
        build(type(load_config(None)), {"engine": {"torch": {"compile": "max"}}})


def test_auto_shapes_are_buckets_on_a_gpu_that_batches_bucketed_else_exact() -> None:
    """Issue 40: the default ("auto") gives a GPU worker the buckets the scheduler already pads
    pages and crops to; a CPU worker, or a GPU told to batch exactly, runs exact shapes."""
    import dataclasses

    from serving.config import EngineConfig
    from serving.engine.choice import engine_options

    engine = EngineConfig()
    assert engine.torch.shapes == "auto"
    assert engine_options(engine, "gpu:0", 2).torch.shapes == "buckets"
    assert engine_options(engine, "cpu", 2).torch.shapes == "exact"
    exact = dataclasses.replace(engine, batching="exact")
    assert engine_options(exact, "gpu:0", 2).torch.shapes == "exact"
    told = dataclasses.replace(engine, torch=TorchOptions(shapes="buckets"))
    assert engine_options(told, "cpu", 2).torch.shapes == "buckets"
    # A predictor never sees "auto"; were it to, it would run exact shapes.
    assert bucket_shape("rec", (3, 3, 48, 333), TorchOptions(shapes="auto")) == (3, 3, 48, 333)


def test_auto_compile_is_on_for_a_gpu_with_its_batch_sizes_and_off_on_the_cpu() -> None:
    """Issue 40: `compile = "auto"` (the default) compiles on a GPU, warmed at the batch sizes
    its worker is sent (`workers.gpu.<stage>.max_batch_size`), and runs eagerly on the CPU."""
    import dataclasses

    from serving.config import AppConfig
    from serving.engine.choice import engine_choice

    config = AppConfig()
    assert config.engine.torch.compile == "auto"
    config = dataclasses.replace(
        config, engine=dataclasses.replace(config.engine, gpu_backend="torch")
    )
    gpu = engine_choice(config, "gpu:0").options
    assert gpu.torch.compile_mode(gpu=gpu.is_gpu) == "default"
    assert (gpu.max_rows("det"), gpu.max_rows("rec")) == (8, 96)
    cpu = engine_choice(config, "cpu").options
    assert cpu.torch.compile_mode(gpu=cpu.is_gpu) == "off"
    assert cpu.max_rows("rec") == config.workers.cpu.rec.max_batch_size
    assert TorchOptions(compile="reduce-overhead").compile_mode(gpu=False) == "reduce-overhead"


def test_bf16_and_fp16_run_on_the_cpu_and_tensorrt_does_not() -> None:
    assert EngineOptions(precision="bf16").precision == "bf16"
    assert EngineOptions(precision="fp16").precision == "fp16"  # autocast, the GPU's stand-in
    with pytest.raises(EngineOptionsError, match="TensorRT"):
        EngineOptions(use_tensorrt=True)
    with pytest.raises(EngineOptionsError, match="compile_budget_s"):
        EngineOptions(torch=TorchOptions(compile_budget_s=0))


def test_warmup_shapes_cover_every_served_bucket() -> None:
    from models.spec import ModelSpec
    from models.torch_compile import warmup_shapes
    from pipelines.types import DetParams, RecParams

    rec = ModelSpec(
        kind="rec",
        model_name="r",
        directory=Path("r"),
        onnx_file=Path("r/inference.onnx"),
        rec_params=RecParams(),
        character_dict=("a",),
    )
    shapes = warmup_shapes(rec, BUCKETS, max_rows=5, small=(1, 3, 48, 320))
    assert shapes == rec_buckets(BUCKETS, height=48, max_batch=5)
    assert {s[0] for s in shapes} == {1, 2, 4, 8}
    det = ModelSpec(
        kind="det",
        model_name="d",
        directory=Path("d"),
        onnx_file=Path("d/inference.onnx"),
        det_params=DetParams(),
    )
    shapes = warmup_shapes(det, BUCKETS, max_rows=2, small=(1, 3, 64, 64))
    assert shapes == [(1, 3, 128, 128), (2, 3, 128, 128), (1, 3, 1792, 1280), (2, 3, 1792, 1280)]
