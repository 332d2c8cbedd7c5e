"""cluster.yaml is a cluster definition that `ray up` accepts, and has what kray needs.

Validation is Ray's own, done the way `ray up` does it before it talks to the
cloud (`prepare_config`: fill in the AWS defaults from Ray's defaults.yaml and
merge the setup commands; then `validate_config`: Ray's JSON schema plus its
cross-field checks). Nothing here contacts AWS: the provider bootstrap that
would (key pairs, subnets, AMIs, instance-type lookups) is never called, and a
fixture makes any network connection an error.
"""
from __future__ import annotations

import copy
import socket
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

REPO_ROOT = Path(__file__).parents[2]
CLUSTER_YAML = REPO_ROOT / "cluster.yaml"
REMOTE_CHECKOUT = "/home/ubuntu/kray"


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"test_cluster_yaml must not touch the network: connect{args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def load_raw() -> dict:
    with CLUSTER_YAML.open() as f:
        return yaml.safe_load(f)


def ray_validate(raw: dict) -> dict:
    """What `ray up` does to a config before its first cloud call."""
    config = prepare_config(copy.deepcopy(raw))
    validate_config(config)
    return config


def worker_types(config: dict) -> dict:
    return {name: t for name, t in config["available_node_types"].items() if name != config["head_node_type"]}


def test_cluster_yaml_is_valid_for_ray_up_and_fits_kray():
    raw = load_raw()
    config = ray_validate(raw)

    assert config["cluster_name"] == "kray"
    assert config["provider"]["type"] == "aws"
    assert config["provider"]["region"] == "us-west-2"
    assert config["auth"]["ssh_user"] == "ubuntu"

    # A head node type and exactly one worker type, at least 3 workers of it.
    head_type = config["head_node_type"]
    assert head_type in raw["available_node_types"]
    head = config["available_node_types"][head_type]
    assert head["node_config"]["InstanceType"] == "m5.large"
    assert head["resources"] == {"CPU": 2}
    assert head["max_workers"] == 0
    workers = worker_types(config)
    assert len(workers) == 1
    (worker,) = workers.values()
    assert worker["node_config"]["InstanceType"] == "m5.large"
    assert worker["min_workers"] >= 3
    assert worker["max_workers"] >= worker["min_workers"]
    assert config["max_workers"] >= worker["min_workers"]

    # The project directory goes to /home/ubuntu/kray on every node.
    local = config["file_mounts"][REMOTE_CHECKOUT]
    assert (REPO_ROOT / local / "pyproject.toml").is_file()
    assert ".venv" in config["rsync_exclude"]

    # Every node: set up by jobs/node.py (Java 17, ZooKeeper's package and the project where missing;
    # Ray's token authentication, with the token made on the user's machine), the head running the
    # 3-server ensemble on 2181-2183 (HEAD: its address) and every node exporting KRAY_ZK_CONNECT.
    from jobs.node import PACKAGES
    assert set(PACKAGES.values()) == {"openjdk-17-jre-headless", "zookeeper"}
    assert raw["setup_commands"][-1] == (
        "python3 ~/kray/jobs/node.py setup --ensemble HEAD:2181:2888:3888,HEAD:2182:2889:3889,HEAD:2183:2890:3890")
    assert f"{REMOTE_CHECKOUT}" in config["file_mounts"] and REMOTE_CHECKOUT.startswith("/home/ubuntu")
    assert config["file_mounts"]["/home/ubuntu/.ray/auth_token"] == "~/.ray/auth_token"
    assert "boto3" in "\n".join(raw["head_setup_commands"])  # the head's autoscaler launches the workers

    # This node's ZooKeeper servers (each `ray up`), then Ray by jobs/node.py: `ray stop`, then `ray start`
    # with the node's address and kray's worker environment (tests/unit/test_node.py), the head with
    # Ray's standard options.
    assert config["head_start_ray_commands"] == [
        "python -m jobs.node zookeeper && python -m jobs.node ray-head -- "
        "--autoscaling-config=~/ray_bootstrap_config.yaml --dashboard-host=0.0.0.0"]
    assert config["worker_start_ray_commands"] == [
        "python -m jobs.node zookeeper && python -m jobs.node ray-worker --address=$RAY_HEAD_IP:6379"]


def test_cluster_local_yaml_is_valid_for_ray_up_and_runs_cluster_yamls_commands():
    """One source for both files' commands: they differ only in where ZooKeeper's servers are, and
    in the AWS head's boto3 (its autoscaler's); tests/integration/test_ray_up.py runs the local one."""
    local_raw = yaml.safe_load((REPO_ROOT / "cluster-local.yaml").read_text())
    local = ray_validate(local_raw)
    assert local["provider"] == {"type": "local", "head_ip": "10.77.0.11", "worker_ips": ["10.77.0.12", "10.77.0.13"]}
    cloud = load_raw()
    for key in ("setup_commands", "head_start_ray_commands", "worker_start_ray_commands", "worker_setup_commands"):
        assert [c.replace("--ensemble 10.77.0.11,10.77.0.12,10.77.0.13", "--ensemble ENSEMBLE") for c in local_raw[key]] \
            == [c.replace("--ensemble HEAD:2181:2888:3888,HEAD:2182:2889:3889,HEAD:2183:2890:3890", "--ensemble ENSEMBLE")
                for c in cloud[key]], key
    assert local_raw["head_setup_commands"] == []
    assert local_raw["file_mounts"]["~/kray"] == "." and local_raw["rsync_exclude"] == cloud["rsync_exclude"]


def test_every_command_is_valid_bash():
    """YAML folding and quoting must leave each command parseable by bash."""
    raw = {k: load_raw().get(k, []) + yaml.safe_load((REPO_ROOT / "cluster-local.yaml").read_text()).get(k, [])
           for k in ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
                     "head_start_ray_commands", "worker_start_ray_commands")}
    keys = ["initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
            "head_start_ray_commands", "worker_start_ray_commands"]
    commands = [cmd for key in keys for cmd in raw.get(key) or []]
    assert commands
    for cmd in commands:
        assert isinstance(cmd, str), cmd
        result = subprocess.run(["bash", "-n", "-c", cmd], capture_output=True, text=True)
        assert result.returncode == 0, f"{cmd!r}: {result.stderr}"


def _unknown_top_level_key(c):
    c["zookeeper_nodes"] = 3


def _max_workers_as_string(c):
    c["max_workers"] = "3"


def _worker_max_workers_as_string(c):
    worker_types(c)["ray.worker.default"]["max_workers"] = "3"


def _unknown_node_type_key(c):
    worker_types(c)["ray.worker.default"]["instance_type"] = "m5.large"


def _missing_resources(c):
    del c["available_node_types"][c["head_node_type"]]["resources"]


def _min_workers_above_global_max(c):
    c["max_workers"] = 2


def _head_type_not_defined(c):
    c["head_node_type"] = "ray.head.missing"


def _setup_command_not_a_string(c):
    c["setup_commands"].append(["pip", "install", "-e", REMOTE_CHECKOUT])


@pytest.mark.parametrize("breakage, error, match", [
    (_unknown_top_level_key, jsonschema.ValidationError, "'zookeeper_nodes' was unexpected"),
    (_max_workers_as_string, jsonschema.ValidationError, "'3' is not of type 'integer'"),
    (_worker_max_workers_as_string, jsonschema.ValidationError, "'3' is not of type 'integer'"),
    (_unknown_node_type_key, jsonschema.ValidationError, "'instance_type' was unexpected"),
    (_missing_resources, jsonschema.ValidationError, "'resources' is a required property"),
    (_setup_command_not_a_string, jsonschema.ValidationError, "is not of type 'string'"),
    (_min_workers_above_global_max, ValueError, "smaller than the sum of `min_workers`"),
    (_head_type_not_defined, ValueError, "must be one of `available_node_types`"),
])
def test_ray_validator_rejects_a_broken_copy(breakage, error, match):
    raw = load_raw()
    ray_validate(raw)  # the real file passes ...
    broken = copy.deepcopy(raw)
    breakage(broken)
    with pytest.raises(error, match=match):  # ... and the same validator catches each breakage
        ray_validate(broken)
