"""The credentials of a job's outside connections, per API key or deployment-wide, read from
config files and never from a request: the secret its webhooks are signed with, and the S3
endpoint and keys its object storage is reached with.

Per key, in the `[[keys]]` entry of `auth.keys_file` (a mounted Secret):

    webhook_secret = "whsec_..."           # Standard Webhooks: whsec_ + base64 of 24-64 bytes
    s3_access_key_id = "..."               # with s3_secret_access_key: this key's S3 identity
    s3_secret_access_key = "..."
    s3_endpoint_url = "https://..."        # optional, else storage.s3_endpoint_url
    s3_region = "eu-west-1"                # optional, else storage.s3_region

Deployment-wide, for jobs sent without a key and keys without their own: `webhooks.secret_file`
(the `whsec_...` line) and `storage.s3_credentials_file` (TOML: `access_key_id`,
`secret_access_key`, optional `endpoint_url` and `region`). The files are read again when they
change, as the API keys are (`serving.http.key_reload`).
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import threading
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.config import AppConfig, StorageConfig
from serving.errors import ConfigError

logger = logging.getLogger(__name__)

KEY_FIELDS = frozenset(
    ("webhook_secret", "s3_endpoint_url", "s3_region", "s3_access_key_id", "s3_secret_access_key")
)
"""What a `[[keys]]` entry may hold besides its id, role, hash and quotas
(`serving.http.keys` accepts them)."""
SECRET_PREFIX = "whsec_"
SECRET_BYTES = (24, 64)
"""A signing secret's size, as the Standard Webhooks specification sets it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class S3Credentials:
    """One S3 identity and where it is used."""

    endpoint_url: str
    """"" = AWS's endpoint for `region`."""
    region: str
    addressing_style: str
    access_key_id: str
    secret_access_key: str = field(repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Credentials:
    """What one key's jobs (or keyless jobs) connect with; None where none is configured."""

    webhook_secret: bytes | None = field(default=None, repr=False)
    s3: S3Credentials | None = None


def parse_webhook_secret(text: object, where: str) -> bytes:
    """The key bytes of a `whsec_...` secret.

    Raises:
        ConfigError: not `whsec_` and the base64 of 24 to 64 bytes (the message holds no secret).
    """
    if not isinstance(text, str) or not text.strip().startswith(SECRET_PREFIX):
        raise ConfigError(where, f"must be a string starting with {SECRET_PREFIX}")
    try:
        key = base64.b64decode(text.strip()[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError) as err:
        raise ConfigError(where, f"must be {SECRET_PREFIX} and base64") from err
    low, high = SECRET_BYTES
    if not low <= len(key) <= high:
        raise ConfigError(where, f"must hold {low} to {high} bytes after {SECRET_PREFIX}")
    return key


def key_credentials(entry: Mapping[str, Any], storage: StorageConfig, where: str) -> Credentials:
    """The credentials a `[[keys]]` entry holds (its other fields are not looked at).

    Raises:
        ConfigError: a field of the wrong type, a bad secret, or half an S3 identity.
    """
    for name in KEY_FIELDS & entry.keys():
        if not isinstance(entry[name], str) or not entry[name]:
            raise ConfigError(where, f"{name} must be a non-empty string")
    secret = None
    if "webhook_secret" in entry:
        secret = parse_webhook_secret(entry["webhook_secret"], f"{where}: webhook_secret")
    s3 = _s3(
        {name.removeprefix("s3_"): entry[name] for name in KEY_FIELDS & entry.keys()},
        storage,
        where,
        prefix="s3_",
    )
    return Credentials(webhook_secret=secret, s3=s3)


def deployment_credentials(config: AppConfig) -> Credentials:
    """The deployment-wide credentials (`webhooks.secret_file`, `storage.s3_credentials_file`).

    Raises:
        ConfigError: a file does not read or is invalid.
    """
    secret = None
    if config.webhooks.secret_file:
        text = _read(config.webhooks.secret_file, "webhooks.secret_file")
        secret = parse_webhook_secret(text.strip(), "webhooks.secret_file")
    s3 = None
    if config.storage.s3_credentials_file:
        where = "storage.s3_credentials_file"
        raw = _toml(_read(config.storage.s3_credentials_file, where), where)
        unknown = set(raw) - {"access_key_id", "secret_access_key", "endpoint_url", "region"}
        if unknown:
            raise ConfigError(where, f"unknown key {sorted(unknown)[0]!r}")
        s3 = _s3(raw, config.storage, where, prefix="")
        if s3 is None:
            raise ConfigError(where, "must hold access_key_id and secret_access_key")
    return Credentials(webhook_secret=secret, s3=s3)


def _s3(
    raw: Mapping[str, Any], storage: StorageConfig, where: str, *, prefix: str
) -> S3Credentials | None:
    key_id, secret = raw.get("access_key_id"), raw.get("secret_access_key")
    if key_id is None and secret is None:
        if raw.get("endpoint_url") or raw.get("region"):
            raise ConfigError(where, f"{prefix}endpoint_url needs {prefix}access_key_id too")
        return None
    if not isinstance(key_id, str) or not isinstance(secret, str) or not key_id or not secret:
        raise ConfigError(where, f"{prefix}access_key_id and {prefix}secret_access_key go together")
    endpoint = raw.get("endpoint_url", storage.s3_endpoint_url)
    if not isinstance(endpoint, str) or (
        endpoint and not endpoint.startswith(("http://", "https://"))
    ):
        raise ConfigError(where, f"{prefix}endpoint_url must be an http:// or https:// URL")
    region = raw.get("region", storage.s3_region)
    if not isinstance(region, str) or not region:
        raise ConfigError(where, f"{prefix}region must be a non-empty string")
    return S3Credentials(
        endpoint_url=endpoint,
        region=region,
        addressing_style=storage.s3_addressing_style,
        access_key_id=key_id,
        secret_access_key=secret,
    )


class CredentialStore:
    """Every key's credentials and the deployment's; `for_owner` reads the files again when one
    of them changed (a rotated secret is used from the next delivery on)."""

    def __init__(self, config: AppConfig) -> None:
        self._config = config
        self._paths = tuple(
            path
            for path in (
                config.auth.keys_file,
                config.webhooks.secret_file,
                config.storage.s3_credentials_file,
            )
            if path
        )
        self._lock = threading.Lock()
        self._stamp: tuple[tuple[int, int, int] | None, ...] | None = None
        self._keys: dict[str, Credentials] = {}
        self._deployment = Credentials()

    @classmethod
    def load(cls, config: AppConfig) -> CredentialStore:
        """The credentials `config` names, read now.

        Raises:
            ConfigError: a file does not read or holds an invalid entry.
        """
        store = cls(config)
        store._read()
        return store

    def for_owner(self, owner: str | None) -> Credentials:
        """What the jobs of key `owner` (None: sent without a key) connect with: the key's own
        secret and S3 identity, each else the deployment's."""
        with self._lock:
            if _stamp(self._paths) != self._stamp:
                try:
                    self._read()
                except ConfigError as err:
                    logger.error("job credentials not reloaded, the previous ones stay: %s", err)
            mine = self._keys.get(owner or "") or Credentials()
            return Credentials(
                webhook_secret=mine.webhook_secret or self._deployment.webhook_secret,
                s3=mine.s3 or self._deployment.s3,
            )

    def _read(self) -> None:
        stamp = _stamp(self._paths)
        deployment = deployment_credentials(self._config)
        keys: dict[str, Credentials] = {}
        if self._config.auth.keys_file:
            where = "auth.keys_file"
            raw = _toml(_read(self._config.auth.keys_file, where), where)
            entries = raw.get("keys", [])
            for i, entry in enumerate(entries if isinstance(entries, list) else []):
                if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                    keys[entry["id"]] = key_credentials(
                        entry, self._config.storage, f"{where}: keys[{i}]"
                    )
        self._deployment, self._keys, self._stamp = deployment, keys, stamp


def _stamp(paths: tuple[str, ...]) -> tuple[tuple[int, int, int] | None, ...]:
    stamps: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            stamps.append(None)
            continue
        stamps.append((info.st_ino, info.st_size, info.st_mtime_ns))
    return tuple(stamps)


def _read(path: str, setting: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(setting, f"cannot read {path}: {err}") from err


def _toml(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(where, f"not valid TOML: {err}") from err
