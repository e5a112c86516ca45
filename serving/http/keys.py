"""API keys as identities: each key is a tenant with an id, a role and quotas, kept as a hash.

Keys come from two places. Plain keys (the `auth.api_keys_env` variable, comma-separated, and the
`auth.api_keys_file` file, one a line) are `user`s named `key-` and the first 8 hex digits of
their SHA-256, so logs and metrics never carry a secret. Named keys come from the TOML file
`auth.keys_file` (a mounted Kubernetes Secret, say), which holds no key either, only its hash:

    [[keys]]
    id = "alice"                 # letters, digits, `.`, `_`, `-`; shown in metrics and logs
    role = "user"                # "user": its own jobs only; "admin": every job
    sha256 = "9f86d0...0a08"     # printf %s "$KEY" | sha256sum
    requests_per_s = 5.0         # optional, else auth.requests_per_s
    burst_requests = 10          # optional, else auth.burst_requests
    max_inflight_pages = 20      # optional, else auth.max_inflight_pages
    max_jobs = 50                # optional, else auth.max_jobs (and max_stored_bytes, _pages)

An entry may also hold the credentials of its jobs' webhooks and object storage
(`webhook_secret`, `s3_access_key_id`, ...: `serving.jobs.credentials`), which are secrets:
they are checked here at start, never kept in an `Identity`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from serving.config import AuthConfig, StorageConfig
from serving.errors import ConfigError
from serving.jobs.credentials import KEY_FIELDS, key_credentials
from serving.scheduling.quotas import KeyQuota

Role = Literal["user", "admin"]
ROLES: tuple[Role, ...] = ("user", "admin")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_QUOTA_KEYS = frozenset(f.name for f in dataclasses.fields(KeyQuota))
_ENTRY_KEYS = frozenset(("id", "role", "sha256", *_QUOTA_KEYS, *KEY_FIELDS))


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """Who sent a request: the key's id (never its secret), its role and its quotas."""

    id: str
    role: Role
    quota: KeyQuota = field(default_factory=KeyQuota)

    def sees(self, owner: str | None) -> bool:
        """Whether this identity may see a job owned by `owner` (None: a job made with
        authentication off, which only admins see once keys are on)."""
        return self.role == "admin" or owner == self.id


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiKey:
    """A configured key: the SHA-256 of its secret and whom it identifies."""

    digest: bytes
    identity: Identity


def hash_key(secret: str | bytes) -> str:
    """The SHA-256 of a key's secret, in hex: what a keys file's `sha256` holds."""
    data = secret.encode("utf-8") if isinstance(secret, str) else secret
    return hashlib.sha256(data).hexdigest()


def plain_key_id(secret: str | bytes) -> str:
    """The id of a plain key: `key-` and the first 8 hex digits of its SHA-256."""
    return f"key-{hash_key(secret)[:8]}"


def load_keys(config: AuthConfig, environ: Mapping[str, str]) -> tuple[ApiKey, ...]:
    """Every configured key: plain ones (the environment variable, then the plain file) as users
    with the default quotas, then the named keys file's. Empty: authentication is off.

    Raises:
        ConfigError: a key file cannot be read or is invalid, or two keys share a secret or an id.
    """
    defaults = KeyQuota(
        requests_per_s=config.requests_per_s,
        burst_requests=config.burst_requests,
        max_inflight_pages=config.max_inflight_pages,
        max_jobs=config.max_jobs,
        max_stored_bytes=config.max_stored_bytes,
        max_stored_pages=config.max_stored_pages,
    )
    secrets: list[str] = []
    if config.api_keys_env:
        secrets += environ.get(config.api_keys_env, "").split(",")
    if config.api_keys_file:
        text = _read(config.api_keys_file, "auth.api_keys_file")
        secrets += [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    plain = dict.fromkeys(secret.strip() for secret in secrets if secret.strip())
    keys = [
        ApiKey(
            digest=hashlib.sha256(secret.encode("utf-8")).digest(),
            identity=Identity(id=plain_key_id(secret), role="user", quota=defaults),
        )
        for secret in plain
    ]
    if config.keys_file:
        keys += parse_keys_file(_read(config.keys_file, "auth.keys_file"), defaults)
    _check_unique(keys)
    return tuple(keys)


def parse_keys_file(text: str, defaults: KeyQuota, path: str = "auth.keys_file") -> list[ApiKey]:
    """The named keys of a keys file (TOML), quotas not given taken from `defaults`.

    Raises:
        ConfigError: not TOML, or an entry is invalid (the message names it; never a secret).
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(path, f"not valid TOML: {err}") from err
    unknown = set(raw) - {"keys"}
    if unknown:
        raise ConfigError(path, f"unknown key {sorted(unknown)[0]!r} (only [[keys]] tables)")
    entries = raw.get("keys", [])
    if not isinstance(entries, list):
        raise ConfigError(path, "keys must be an array of tables ([[keys]])")
    return [_entry(entry, defaults, f"{path}: keys[{i}]") for i, entry in enumerate(entries)]


def identify(sent: bytes, keys: Iterable[ApiKey]) -> Identity | None:
    """The identity whose key is `sent`, comparing its hash with every key's in constant time."""
    digest = hashlib.sha256(sent).digest()
    found = None
    for key in keys:  # no short circuit: every key is compared
        if hmac.compare_digest(digest, key.digest):
            found = key.identity
    return found


def _entry(entry: Any, defaults: KeyQuota, where: str) -> ApiKey:
    if not isinstance(entry, dict):
        raise ConfigError(where, "must be a table")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise ConfigError(where, f"unknown key {sorted(unknown)[0]!r}")
    key_id, role, sha256 = entry.get("id"), entry.get("role", "user"), entry.get("sha256")
    if not isinstance(key_id, str) or not _ID.fullmatch(key_id):
        raise ConfigError(where, "id must be 1-64 letters, digits, '.', '_' or '-'")
    if role not in ROLES:
        raise ConfigError(where, f"role of {key_id} must be user or admin")
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256.lower()):
        raise ConfigError(
            where, f"sha256 of {key_id} must be 64 hex digits (the SHA-256 of the key, not the key)"
        )
    key_credentials(entry, StorageConfig(), where)  # the secrets are checked, not kept here
    quota = {name: entry[name] for name in _QUOTA_KEYS if name in entry}
    for name, value in quota.items():
        whole = name != "requests_per_s"
        kinds = (int,) if whole else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or value < 0:
            kind = "a whole number" if whole else "a number"
            raise ConfigError(where, f"{name} of {key_id} must be {kind} >= 0")
        quota[name] = value if whole else float(value)
    return ApiKey(
        digest=bytes.fromhex(sha256.lower()),
        identity=Identity(
            id=key_id, role=cast(Role, role), quota=dataclasses.replace(defaults, **quota)
        ),
    )


def _check_unique(keys: list[ApiKey]) -> None:
    ids: set[str] = set()
    digests: set[bytes] = set()
    for key in keys:
        if key.identity.id in ids:
            raise ConfigError("auth.keys_file", f"two keys are named {key.identity.id}")
        if key.digest in digests:
            raise ConfigError("auth.keys_file", f"key {key.identity.id} has another key's secret")
        ids.add(key.identity.id)
        digests.add(key.digest)


def _read(path: str, setting: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(setting, f"cannot read the key file: {err}") from err
