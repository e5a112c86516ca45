"""One typed configuration object, read from `config.toml`; unknown keys are errors.

One module per `config.toml` section (`server`, `input`, `auth`, `paddlex`, `models`,
`pipeline`, `engine`, `workers`, `jobs`, `webhooks`, `storage`, `telemetry`, `mcp`), `app` for
the whole `AppConfig`, and `loading` for reading the file and the `OCR_<SECTION>__<KEY>`
overrides. Import the names from here (`from serving.config import AppConfig`); a new key goes
into its section's module, with a docstring, a check in `__post_init__` and a line in
`config.toml`.
"""

from serving.config.app import AppConfig, describe
from serving.config.auth import AuthConfig
from serving.config.engine import BATCHING_SETTINGS, BatchingSetting, EngineConfig
from serving.config.input import InputConfig
from serving.config.jobs import JobsConfig, redact_url
from serving.config.loading import (
    ENV_PREFIX,
    NOT_PATHS,
    apply_env_overrides,
    build,
    env_value,
    load_config,
    with_paths_resolved,
)
from serving.config.mcp import McpConfig
from serving.config.models import ModelsConfig, ModelSetConfig
from serving.config.paddlex import PaddlexConfig
from serving.config.pipeline import DetPipelineConfig, PipelineConfig, RecPipelineConfig
from serving.config.server import ServerConfig
from serving.config.storage import StorageConfig
from serving.config.telemetry import TelemetryConfig
from serving.config.webhooks import WebhooksConfig
from serving.config.workers import (
    STAGES,
    DeviceClassConfig,
    QueueConfig,
    StageLimits,
    WorkersConfig,
)

__all__ = [
    "BATCHING_SETTINGS",
    "ENV_PREFIX",
    "NOT_PATHS",
    "STAGES",
    "AppConfig",
    "AuthConfig",
    "BatchingSetting",
    "DetPipelineConfig",
    "DeviceClassConfig",
    "EngineConfig",
    "InputConfig",
    "JobsConfig",
    "McpConfig",
    "ModelSetConfig",
    "ModelsConfig",
    "PaddlexConfig",
    "PipelineConfig",
    "QueueConfig",
    "RecPipelineConfig",
    "ServerConfig",
    "StageLimits",
    "StorageConfig",
    "TelemetryConfig",
    "WebhooksConfig",
    "WorkersConfig",
    "apply_env_overrides",
    "build",
    "describe",
    "env_value",
    "load_config",
    "redact_url",
    "with_paths_resolved",
]
