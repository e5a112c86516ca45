"""Unit tests for serving/http/keys.py: keys as identities (ids, roles, quotas), kept as hashes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from serving.config import AuthConfig
from serving.errors import ConfigError
from serving.http.keys import Identity, hash_key, identify, load_keys, parse_keys_file
from serving.scheduling.quotas import KeyQuota

ALICE = "alice-secret-0123456789"
ROOT = "root-secret-9876543210"


def _keys_file(tmp_path: Path, text: str) -> AuthConfig:
    path = tmp_path / "keys.toml"
    path.write_text(text)
    return AuthConfig(keys_file=str(path), api_keys_env="")


STORED = {
    "max_jobs": AuthConfig().max_jobs,
    "max_stored_bytes": AuthConfig().max_stored_bytes,
    "max_stored_pages": AuthConfig().max_stored_pages,
}
"""What a key may keep in the job store, `[auth]`'s defaults unless its entry says."""


def test_hash_is_the_sha256_hex_of_the_secret() -> None:
    assert hash_key("test") == hashlib.sha256(b"test").hexdigest()
    assert hash_key(b"test") == hash_key("test")


def test_plain_keys_are_users_named_by_their_hash_never_the_secret() -> None:
    keys = load_keys(AuthConfig(requests_per_s=2.0), {"OCR_API_KEYS": f"{ALICE},{ROOT}"})
    assert [key.identity.id for key in keys] == [
        f"key-{hash_key(ALICE)[:8]}",
        f"key-{hash_key(ROOT)[:8]}",
    ]
    for key, secret in zip(keys, (ALICE, ROOT), strict=True):
        assert key.identity.role == "user"
        assert key.identity.quota == KeyQuota(requests_per_s=2.0, **STORED)
        assert key.digest == hashlib.sha256(secret.encode()).digest()
        assert secret not in repr(key)


def test_named_keys_file(tmp_path: Path) -> None:
    config = _keys_file(
        tmp_path,
        f"""
        # mounted from the Secret ocr-api-keys
        [[keys]]
        id = "alice"
        sha256 = "{hash_key(ALICE)}"
        requests_per_s = 5
        max_inflight_pages = 20

        [[keys]]
        id = "ops.root"
        role = "admin"
        sha256 = "{hash_key(ROOT).upper()}"
        """,
    )
    config = AuthConfig(
        keys_file=config.keys_file, api_keys_env="", burst_requests=3, max_inflight_pages=7
    )
    alice, root = (key.identity for key in load_keys(config, {}))
    assert alice == Identity(
        id="alice",
        role="user",
        quota=KeyQuota(requests_per_s=5.0, burst_requests=3, max_inflight_pages=20, **STORED),
    )
    assert root == Identity(
        id="ops.root",
        role="admin",
        quota=KeyQuota(burst_requests=3, max_inflight_pages=7, **STORED),
    )
    keys = load_keys(config, {})
    assert identify(ALICE.encode(), keys) == alice
    assert identify(ROOT.encode(), keys) == root
    assert identify(hash_key(ALICE).encode(), keys) is None  # the hash is not a key


def test_plain_and_named_keys_together(tmp_path: Path) -> None:
    config = _keys_file(tmp_path, f'[[keys]]\nid = "alice"\nsha256 = "{hash_key(ALICE)}"\n')
    config = AuthConfig(keys_file=config.keys_file)
    keys = load_keys(config, {"OCR_API_KEYS": "legacy"})
    assert [key.identity.id for key in keys] == [f"key-{hash_key('legacy')[:8]}", "alice"]


def test_users_see_their_own_jobs_and_admins_every_job() -> None:
    user = Identity(id="alice", role="user")
    admin = Identity(id="root", role="admin")
    assert user.sees("alice")
    assert not user.sees("bob")
    assert not user.sees(None)  # made with authentication off: admins only
    assert admin.sees("bob")
    assert admin.sees(None)


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ('id = "alice"', "sha256 of alice must be 64 hex digits"),
        (f'id = "alice"\nsha256 = "{ALICE}"', "sha256 of alice must be 64 hex digits"),
        (f'sha256 = "{hash_key(ALICE)}"', "id must be"),
        (f'id = "has space"\nsha256 = "{hash_key(ALICE)}"', "id must be"),
        (f'id = "-dash"\nsha256 = "{hash_key(ALICE)}"', "id must be"),
        (
            f'id = "a"\nrole = "root"\nsha256 = "{hash_key(ALICE)}"',
            "role of a must be user or admin",
        ),
        (f'id = "a"\nsha256 = "{hash_key(ALICE)}"\nsecret = "x"', "unknown key 'secret'"),
        (f'id = "a"\nsha256 = "{hash_key(ALICE)}"\nrequests_per_s = -1', "requests_per_s of a"),
        (f'id = "a"\nsha256 = "{hash_key(ALICE)}"\nmax_inflight_pages = 1.5', "whole number"),
        (f'id = "a"\nsha256 = "{hash_key(ALICE)}"\nburst_requests = true', "burst_requests of a"),
    ],
)
def test_invalid_entries_name_the_problem(entry: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=r"auth\.keys_file: keys\[0\]") as caught:
        parse_keys_file(f"[[keys]]\n{entry}\n", KeyQuota())
    assert problem in str(caught.value)
    assert ALICE not in str(caught.value)  # a secret pasted by mistake is never echoed


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[keys]\n", "not valid TOML"),
        ('keys = "alice"\n', "array of tables"),
        ("[server]\nport = 1\n", "unknown key 'server'"),
    ],
)
def test_invalid_files(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_keys_file(text, KeyQuota())


def test_an_empty_keys_file_has_no_keys() -> None:
    assert parse_keys_file("# no keys yet\n", KeyQuota()) == []


def test_two_keys_with_one_id_or_one_secret_are_refused(tmp_path: Path) -> None:
    entry = '[[keys]]\nid = "{}"\nsha256 = "{}"\n'
    same_id = _keys_file(
        tmp_path, entry.format("a", hash_key("1")) + entry.format("a", hash_key("2"))
    )
    with pytest.raises(ConfigError, match="two keys are named a"):
        load_keys(same_id, {})
    same_secret = _keys_file(
        tmp_path, entry.format("a", hash_key("1")) + entry.format("b", hash_key("1"))
    )
    with pytest.raises(ConfigError, match="key b has another key's secret"):
        load_keys(same_secret, {})
    named = _keys_file(tmp_path, entry.format("a", hash_key("1")))
    with pytest.raises(ConfigError, match="another key's secret"):
        load_keys(AuthConfig(keys_file=named.keys_file), {"OCR_API_KEYS": "1"})


def test_unreadable_keys_file_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"auth\.keys_file: cannot read"):
        load_keys(AuthConfig(keys_file=str(tmp_path / "missing")), {})


@pytest.mark.parametrize("name", ["requests_per_s", "burst_requests", "max_inflight_pages"])
def test_negative_default_quota_is_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match=rf"auth\.{name}"):
        AuthConfig(**{name: -1})  # type: ignore[arg-type]
