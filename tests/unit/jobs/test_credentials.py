"""serving/jobs/credentials.py: the per-key and deployment-wide secrets of webhooks and S3,
from config files only, read again when a file changes."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from serving.config import AppConfig, AuthConfig, StorageConfig, WebhooksConfig
from serving.errors import ConfigError
from serving.http.keys import hash_key, parse_keys_file
from serving.jobs.credentials import CredentialStore, parse_webhook_secret
from serving.scheduling.quotas import KeyQuota

KEY = b"k" * 32
WHSEC = "whsec_" + base64.b64encode(KEY).decode()
DEPLOYMENT = "whsec_" + base64.b64encode(b"d" * 24).decode()


def test_a_secret_is_whsec_and_24_to_64_bytes() -> None:
    assert parse_webhook_secret(WHSEC, "x") == KEY
    for bad in ("k" * 40, "whsec_not-base64!", "whsec_" + base64.b64encode(b"short").decode()):
        with pytest.raises(ConfigError):
            parse_webhook_secret(bad, "x")


def _config(tmp_path: Path, keys: str) -> AppConfig:
    (tmp_path / "keys.toml").write_text(keys)
    (tmp_path / "whsec").write_text(DEPLOYMENT + "\n")
    (tmp_path / "s3.toml").write_text('access_key_id = "AK"\nsecret_access_key = "SK"\n')
    return AppConfig(
        auth=AuthConfig(keys_file=str(tmp_path / "keys.toml")),
        webhooks=WebhooksConfig(secret_file=str(tmp_path / "whsec")),
        storage=StorageConfig(
            s3_endpoint_url="http://minio:9000",
            s3_credentials_file=str(tmp_path / "s3.toml"),
        ),
    )


KEYS = f"""
[[keys]]
id = "alice"
sha256 = "{hash_key("alice")}"
webhook_secret = "{WHSEC}"
s3_access_key_id = "ALICE"
s3_secret_access_key = "alice-secret"
s3_region = "eu-west-1"
[[keys]]
id = "bob"
sha256 = "{hash_key("bob")}"
"""


def test_a_key_uses_its_own_else_the_deployments(tmp_path: Path) -> None:
    store = CredentialStore.load(_config(tmp_path, KEYS))
    alice, bob, keyless = (store.for_owner(o) for o in ("alice", "bob", None))
    assert alice.webhook_secret == KEY
    assert alice.s3 is not None
    assert (alice.s3.access_key_id, alice.s3.region) == ("ALICE", "eu-west-1")
    assert alice.s3.endpoint_url == "http://minio:9000"  # the deployment's endpoint
    assert "alice-secret" not in repr(alice)
    assert bob.webhook_secret == keyless.webhook_secret == b"d" * 24
    assert bob.s3 is not None
    assert bob.s3.access_key_id == "AK"


def test_a_changed_file_is_read_again_and_a_broken_one_keeps_the_last(tmp_path: Path) -> None:
    config = _config(tmp_path, KEYS)
    store = CredentialStore.load(config)
    rotated = "whsec_" + base64.b64encode(b"r" * 30).decode()
    (tmp_path / "keys.toml").write_text(KEYS.replace(WHSEC, rotated) + "\n")
    assert store.for_owner("alice").webhook_secret == b"r" * 30
    (tmp_path / "keys.toml").write_text(KEYS.replace(WHSEC, "whsec_broken") + "\n\n")
    assert store.for_owner("alice").webhook_secret == b"r" * 30


def test_the_keys_file_refuses_a_bad_secret_at_start() -> None:
    text = f'[[keys]]\nid = "a"\nsha256 = "{hash_key("a")}"\nwebhook_secret = "nope"\n'
    with pytest.raises(ConfigError, match="whsec_"):
        parse_keys_file(text, KeyQuota())
    half = f'[[keys]]\nid = "a"\nsha256 = "{hash_key("a")}"\ns3_access_key_id = "A"\n'
    with pytest.raises(ConfigError, match="go together"):
        parse_keys_file(half, KeyQuota())
