"""The cluster configuration's ZooKeeper credential: from the environment or the configuration, and
never shown (pure: the client is built, not started)."""
from __future__ import annotations

from actors.config import ClusterConfig
from coordination.zkclient import CREDENTIAL_ENV, SECURE_ACL


def test_the_credential_never_shows_and_reaches_the_client(monkeypatch):
    monkeypatch.delenv(CREDENTIAL_ENV, raising=False)
    config = ClusterConfig(zk_connect="127.0.0.1:1/kray", zk_credential="kray:s3cret")
    assert "s3cret" not in repr(config) and "s3cret" not in config.model_dump_json()
    client = config.zk_client()
    assert client.kazoo.auth_data == {("digest", "kray:s3cret")} and client.kazoo.default_acl == SECURE_ACL
    assert ClusterConfig(zk_connect="x").zk_client().kazoo.default_acl is None  # no credential: open znodes


def test_the_credential_defaults_to_the_environment(monkeypatch):
    monkeypatch.setenv(CREDENTIAL_ENV, "kray:from-env")
    assert ClusterConfig(zk_connect="x").zk_credential.get_secret_value() == "kray:from-env"
