"""Where the configuration's relative paths point, the same for `ocr-serve`, `ocr-batch` and
`python -m serving.convert`.

A relative path in a config file is relative to that file's folder: `--config
/srv/ocr/config.toml` with `onnx_dir = "models/onnx"` finds `/srv/ocr/models/onnx` from any
working directory. It used to be the working directory's, and `ocr-batch` run outside the clone
said there was no conversion. A path from an `OCR_<SECTION>__<KEY>` variable is relative to the
working directory, as a path typed on the command line is. The defaults, of keys a file leaves
out or of every key without a file, are the project's `config.toml` values, so they are
relative to that file's folder where the package runs from its source tree (an editable install,
`make install`: `make convert` put the conversions there), else to the working directory. A
config written elsewhere with only a few keys (the bench's, the soak's, a user's) still finds
the clone's conversions. The data a server keeps (`DATA_KEYS`: the job store) is the exception:
a file that leaves it out keeps it beside the file, so two configs never share a store. `~` is
expanded; absolute paths and empty values (none) are kept; `models.*` values starting with
`embedded:` are not paths.
"""

from __future__ import annotations

import os
from pathlib import Path

from models.embedded import EMBEDDED_PREFIX

PATH_SECTIONS: tuple[str, ...] = ("models",)
"""Sections whose every key is a path (`models.*`: a model directory, or `embedded:NAME`)."""
PATH_KEYS: tuple[tuple[str, str], ...] = (
    ("auth", "api_keys_file"),
    ("auth", "keys_file"),
    ("engine", "trt_cache_dir"),
    ("engine", "onnx_dir"),
    ("engine", "precision_check_dir"),
    ("engine", "paddle_dir"),
    ("jobs", "data_dir"),
    ("webhooks", "secret_file"),
    ("storage", "s3_credentials_file"),
)
"""(section, key) of the other configuration values that are filesystem paths."""

DATA_KEYS: tuple[tuple[str, str], ...] = (("jobs", "data_dir"),)
"""Paths of the data a server keeps: their defaults, for a config file that leaves them out, are
beside the file (each config its own job store: the tests run many servers at once), not the
clone's."""

PROJECT_DIR = Path(__file__).resolve().parents[1]
"""The source tree this package runs from, when it does (its `config.toml` holds the defaults)."""


def resolve_path(value: str, base: Path) -> str:
    """`value` as an absolute path when it is a relative one (against `base`), else unchanged."""
    if not value or value.startswith(EMBEDDED_PREFIX):
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else base / path)


def is_path_key(keys: list[str]) -> bool:
    """Whether the key path `keys` (`["engine", "onnx_dir"]`) names a path value."""
    return len(keys) == 2 and (keys[0] in PATH_SECTIONS or (keys[0], keys[1]) in PATH_KEYS)


def file_base(config_file: Path) -> Path:
    """The folder a config file's relative paths resolve against: the file's own, absolute, with
    links kept (a Kubernetes ConfigMap mounts `config.toml` as a link into a dated folder)."""
    return Path(os.path.abspath(config_file)).parent


def defaults_base() -> Path:
    """The folder the defaults' relative paths resolve against: the source tree's when the package
    runs from one (its `config.toml` holds the defaults), else the working directory."""
    if (PROJECT_DIR / "config.toml").is_file():
        return PROJECT_DIR
    return Path.cwd()
