"""The admission cap grows with the GPUs a server serves on (issue 40: a GPU's det batches of 8
pages and rec batches of 96 lines fill only with hundreds of pages in flight), and /readyz says
the cap and where it comes from."""

from __future__ import annotations

import dataclasses

from serving.config import AppConfig, EngineConfig, ServerConfig, WorkersConfig
from serving.scheduling.admission import admission_pages
from serving.service.runtime import Runtime


def test_the_cap_is_the_configured_one_without_gpus_and_grows_with_each_gpu() -> None:
    assert admission_pages(64, 256, 0) == (64, "server.max_inflight_pages")
    pages, why = admission_pages(64, 256, 2)
    assert pages == 64 + 2 * 256
    assert "inflight_pages_per_gpu (256) x 2 GPUs" in why
    assert admission_pages(64, 0, 2) == (64, "server.max_inflight_pages")


def test_a_server_on_gpus_admits_more_and_readyz_says_why() -> None:
    workers = dataclasses.replace(WorkersConfig(), devices=("gpu:0", "gpu:1", "cpu"))
    server = dataclasses.replace(ServerConfig(), max_inflight_pages=10, inflight_pages_per_gpu=100)
    engine = dataclasses.replace(EngineConfig(), gpu_backend="torch")  # then the fake's
    config = AppConfig(server=server, workers=workers, engine=engine)
    runtime = Runtime.build(config, backend="fake", jobs=False)
    described = runtime.service.admission.describe()
    assert described["max_pages"] == 210
    assert "x 2 GPUs" in str(described["max_pages_why"])
    on_cpu = Runtime.build(
        dataclasses.replace(config, workers=dataclasses.replace(workers, devices=("cpu",))),
        backend="fake",
        jobs=False,
    )
    assert on_cpu.service.admission.describe()["max_pages"] == 10
