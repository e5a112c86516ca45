"""The whole configuration, `AppConfig`: one field per section."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from serving.config.auth import AuthConfig
from serving.config.engine import EngineConfig
from serving.config.input import InputConfig
from serving.config.jobs import JobsConfig, redact_url
from serving.config.mcp import McpConfig
from serving.config.models import ModelsConfig
from serving.config.paddlex import PaddlexConfig
from serving.config.pipeline import PipelineConfig
from serving.config.server import ServerConfig
from serving.config.storage import StorageConfig
from serving.config.telemetry import TelemetryConfig
from serving.config.webhooks import WebhooksConfig
from serving.config.workers import WorkersConfig
from serving.cpus import available_cpus


@dataclass(frozen=True, slots=True, kw_only=True)
class AppConfig:
    """The whole configuration; built once in `cli.main` and passed down."""

    server: ServerConfig = field(default_factory=ServerConfig)
    input: InputConfig = field(default_factory=InputConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    paddlex: PaddlexConfig = field(default_factory=PaddlexConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    jobs: JobsConfig = field(default_factory=JobsConfig)
    webhooks: WebhooksConfig = field(default_factory=WebhooksConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    mcp: McpConfig = field(default_factory=McpConfig)

    @property
    def cpu_workers(self) -> int:
        """Effective CPU worker count: the CPUs this container may use (`serving.cpus`)."""
        return self.workers.cpu_workers or available_cpus()

    @property
    def cpu_threads(self) -> int:
        """Effective math threads per CPU device worker: the cores shared among its instances."""
        cores = available_cpus()
        return self.engine.cpu_threads or max(1, cores // self.workers.cpu_instances)

    @property
    def cpu_lone_threads(self) -> int:
        """Effective threads of a batch a CPU device worker runs alone (`engine.cpu_lone_threads`);
        none (0) with one CPU device worker or no more than its own threads."""
        threads = self.engine.cpu_lone_threads or available_cpus()
        alone = self.workers.cpu_instances > 1 and threads > self.cpu_threads
        return threads if alone else 0


def describe(config: AppConfig) -> dict[str, Any]:
    """The effective configuration as plain data, for the start-up log."""
    data = dataclasses.asdict(config)
    data["workers"]["cpu_workers"] = config.cpu_workers
    data["engine"]["cpu_threads"] = config.cpu_threads
    data["engine"]["cpu_lone_threads"] = config.cpu_lone_threads
    data["jobs"]["store"] = redact_url(config.jobs.store)
    return data
