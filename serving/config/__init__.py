"""One typed configuration object, read from `config.toml`; unknown keys are errors.

One module per `config.toml` section (`server`, `input`, `auth`, `paddlex`, `models`,
`pipeline`, `engine`, `workers`, `jobs`), `app` for the whole `AppConfig`, and `loading` for
reading the file and the `OCR_<SECTION>__<KEY>` overrides. Import the names from here
(`from serving.config import AppConfig`); a new key goes into its section's module, with a
docstring, a check in `__post_init__` and a line in `config.toml`.
"""

from serving.config.app import AppConfig, describe
from serving.config.auth import AuthConfig
from serving.config.checks import choices_text
from serving.config.engine import EngineConfig
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
from serving.config.models import ModelsConfig, ModelSetConfig
from serving.config.paddlex import PaddlexConfig
from serving.config.pipeline import (
    ORIENTATION_MODES,
    PIPELINE_RANGES,
    DetPipelineConfig,
    OrientationMode,
    PipelineConfig,
    RecPipelineConfig,
    in_range,
    range_text,
)
from serving.config.server import ServerConfig
from serving.config.workers import (
    STAGES,
    DeviceClassConfig,
    QueueConfig,
    StageLimits,
    WorkersConfig,
)

__all__ = [
    "ENV_PREFIX",
    "NOT_PATHS",
    "ORIENTATION_MODES",
    "PIPELINE_RANGES",
    "STAGES",
    "AppConfig",
    "AuthConfig",
    "DetPipelineConfig",
    "DeviceClassConfig",
    "EngineConfig",
    "InputConfig",
    "JobsConfig",
    "ModelSetConfig",
    "ModelsConfig",
    "OrientationMode",
    "PaddlexConfig",
    "PipelineConfig",
    "QueueConfig",
    "RecPipelineConfig",
    "ServerConfig",
    "StageLimits",
    "WorkersConfig",
    "apply_env_overrides",
    "build",
    "choices_text",
    "describe",
    "env_value",
    "in_range",
    "load_config",
    "range_text",
    "redact_url",
    "with_paths_resolved",
]
