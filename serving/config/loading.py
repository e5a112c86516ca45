"""Loading the configuration: `config.toml`, then the `OCR_<SECTION>__<KEY>` environment
overrides, built into an `AppConfig` whose unknown keys and wrong types are errors, its relative
paths made absolute (`serving.config_paths`)."""

from __future__ import annotations

import copy
import dataclasses
import math
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from serving import config_paths
from serving.config.app import AppConfig
from serving.errors import ConfigError
from serving.options import choices_text

T = TypeVar("T")


def build(cls: type[T], raw: dict[str, Any], path: str = "", base: T | None = None) -> T:
    """Build dataclass `cls` from a TOML mapping, rejecting unknown keys and wrong types.

    Keys missing from `raw` keep their value in `base` (default: the field defaults), so a
    partial `[workers.gpu]` table keeps the GPU defaults of the keys it leaves out.
    """
    if not isinstance(raw, dict):
        raise ConfigError(path or "<root>", "must be a table")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in raw:
        if key not in fields:
            raise ConfigError(_join(path, key), "unknown key")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        hint, sub = hints[key], _join(path, key)
        if dataclasses.is_dataclass(hint):
            inner = getattr(base, key) if base is not None else _field_default(fields[key])
            kwargs[key] = build(hint, value, sub, inner)  # type: ignore[arg-type]
        else:
            kwargs[key] = _convert(hint, value, sub)
    try:
        if base is not None:
            return dataclasses.replace(base, **kwargs)  # type: ignore[type-var]
        return cls(**kwargs)
    except ConfigError:
        raise
    except TypeError as err:
        raise ConfigError(path or "<root>", str(err)) from err


def _field_default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _convert(hint: Any, value: Any, path: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return build(hint, value, path)  # type: ignore[arg-type]
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        choices = typing.get_args(hint)
        if not any(value == c and type(value) is type(c) for c in choices):
            raise ConfigError(path, f"must be {choices_text(choices)}, got {value!r}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, "must be a table")
        _key_hint, item_hint = typing.get_args(hint)
        return {str(k): _convert(item_hint, v, _join(path, str(k))) for k, v in value.items()}
    if origin is tuple:
        if isinstance(value, str):  # `devices = "auto"` is shorthand for ["auto"]
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(path, "must be a list")
        (item_hint, *_rest) = typing.get_args(hint)
        return tuple(_convert(item_hint, v, path) for v in value)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            if option is not type(None):
                return _convert(option, value, path)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError as err:  # TOML integers have no size limit in tomllib
            raise ConfigError(path, "must be a finite number") from err
    if hint in (int, float, str, bool):
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            raise ConfigError(path, f"must be {hint.__name__}, got {type(value).__name__}")
        if hint is float and not math.isfinite(value):
            raise ConfigError(path, f"must be a finite number, got {value}")
        return value
    raise ConfigError(path, f"unsupported type {hint!r}")


def load_config(path: Path | None, environ: Mapping[str, str] | None = None) -> AppConfig:
    """Read `path` (or start from the defaults when None), apply the `OCR_*` overrides found in
    `environ` (none when None), and build the `AppConfig`, its paths absolute: the environment's
    relative to the working directory, the file's to its folder, and the defaults (those the file
    leaves out, or all without a file) to the project's, but for the data a server keeps
    (`config_paths.DATA_KEYS`), whose default with a file is beside it (`serving.config_paths`)."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            with path.open("rb") as f:
                raw = tomllib.load(f)
        except OSError as err:
            raise ConfigError(str(path), f"cannot read: {err.strerror}") from err
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(str(path), f"invalid TOML: {err}") from err
        raw = _file_paths_resolved(raw, config_paths.file_base(path))
    if environ is not None:
        raw = apply_env_overrides(raw, environ)
    config = build(AppConfig, raw)
    if path is not None:  # the data a file's server keeps: beside the file, as it always was
        data = config_paths.file_base(path)
        sections = {
            section: dataclasses.replace(
                getattr(config, section),
                **{key: config_paths.resolve_path(getattr(getattr(config, section), key), data)},
            )
            for section, key in config_paths.DATA_KEYS
        }
        config = dataclasses.replace(config, **sections)
    return with_paths_resolved(config, config_paths.defaults_base())


def _file_paths_resolved(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    """A config file's own path values (`config_paths.PATH_KEYS`, every key of
    `PATH_SECTIONS`, the model sets' det and rec) made absolute against `base`, its folder; the
    defaults it leaves out are resolved later, against the project's folder."""
    resolved = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    keys = [key for key in config_paths.PATH_KEYS if isinstance(resolved.get(key[0]), dict)]
    for section in config_paths.PATH_SECTIONS:
        table = resolved.get(section)
        if isinstance(table, dict):
            keys += [(section, key) for key in table if key not in NOT_PATHS]
    for section, key in keys:
        value = resolved[section].get(key)
        if isinstance(value, str):
            resolved[section][key] = config_paths.resolve_path(value, base)
    sets = resolved.get("models", {}).get("sets")
    if isinstance(sets, dict):
        resolved["models"]["sets"] = {
            name: {
                key: config_paths.resolve_path(value, base)
                if key in ("det", "rec") and isinstance(value, str)
                else value
                for key, value in model_set.items()
            }
            if isinstance(model_set, dict)
            else model_set
            for name, model_set in sets.items()
        }
    return resolved


def with_paths_resolved(config: AppConfig, base: Path) -> AppConfig:
    """`config` with its relative path values (`config_paths.PATH_KEYS`, every key of
    `PATH_SECTIONS`) made absolute against `base` (the environment's are absolute by then:
    `apply_env_overrides`)."""
    keys = list(config_paths.PATH_KEYS)
    for section in config_paths.PATH_SECTIONS:
        table = getattr(config, section)
        keys += [
            (section, f.name)
            for f in dataclasses.fields(table)
            if isinstance(getattr(table, f.name), str) and f.name not in NOT_PATHS
        ]
    sections: dict[str, Any] = {}
    for section, key in keys:
        table = sections.get(section, getattr(config, section))
        value = config_paths.resolve_path(getattr(table, key), base)
        sections[section] = dataclasses.replace(table, **{key: value})
    models = sections.get("models", config.models)
    sets = {  # the other model sets' det and rec (`[models.sets.NAME]`) are paths too
        name: dataclasses.replace(
            model_set,
            det=config_paths.resolve_path(model_set.det, base),
            rec=config_paths.resolve_path(model_set.rec, base),
        )
        for name, model_set in models.sets.items()
    }
    sections["models"] = dataclasses.replace(models, sets=sets)
    return dataclasses.replace(config, **sections)


NOT_PATHS = ("name",)
"""String keys of `PATH_SECTIONS` that are no paths: `models.name`, the default set's name."""


ENV_PREFIX = "OCR_"
"""`OCR_<SECTION>__<KEY>=value` overrides `[section] key`; `__` separates every level."""


def apply_env_overrides(raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """A copy of the TOML mapping `raw` with the `OCR_<SECTION>__<KEY>` variables applied.

    Only names holding `__` are overrides (`OCR_CONFIG`, the file's path, is not one). Names are
    lower-cased into a key path: `OCR_WORKERS__CPU__DET__MAX_BATCH_SIZE` sets
    `workers.cpu.det.max_batch_size`. Values are read as TOML values (`9000`, `true`,
    `["gpu:0", "cpu"]`, `{ max_batch_size = 2, max_cost = 9 }`), else taken as plain strings
    (`0.0.0.0`, `debug`). Unknown keys are refused later by `build`, with their path. A relative
    path value is made absolute against the working directory (`serving.config_paths`).
    """
    merged = copy.deepcopy(raw)
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        keys = name[len(ENV_PREFIX) :].lower().split("__")
        path = ".".join(keys)
        if not all(keys):
            raise ConfigError(path, f"empty key in the environment variable {name}")
        table = merged
        for depth, key in enumerate(keys[:-1]):
            inner = table.setdefault(key, {})
            if not isinstance(inner, dict):
                where = ".".join(keys[: depth + 1])
                raise ConfigError(where, f"is not a table, so {name} cannot set a key inside it")
            table = inner
        value = env_value(environ[name])
        if isinstance(value, str) and config_paths.is_path_key(keys):
            value = config_paths.resolve_path(value, Path.cwd())
        table[keys[-1]] = value
    return merged


def env_value(text: str) -> Any:
    """An environment value as TOML reads it after `v = `, else the text itself."""
    if "\n" in text or "\r" in text:
        return text
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
