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

    # Every node: Java 17, ZooKeeper's package, and the project installed.
    setup = "\n".join(raw["setup_commands"])
    assert "apt-get install" in setup
    assert "openjdk-17-jre-headless" in setup
    assert " zookeeper" in setup
    assert f"pip install -e {REMOTE_CHECKOUT}" in setup
    # Ray's token authentication on every node, with the token made on the user's machine.
    assert "export RAY_AUTH_MODE=token" in setup
    assert config["file_mounts"]["/home/ubuntu/.ray/auth_token"] == "~/.ray/auth_token"

    # The head: after the common setup, starts a 3-server ZooKeeper ensemble on 2181-2183 and
    # exports KRAY_ZK_CONNECT for jobs; the workers export the head's addresses.
    head_setup = config["head_setup_commands"]
    assert head_setup[: len(raw["setup_commands"])] == raw["setup_commands"]
    head_only = "\n".join(raw["head_setup_commands"])
    assert "/usr/share/zookeeper/bin/zkServer.sh start" in head_only
    assert '"clientPort=218$i"' in head_only and "for i in 1 2 3" in head_only
    assert all(f"server.{i}=127.0.0.1:{2887 + i}:{3887 + i}" in head_only for i in (1, 2, 3))
    assert "KRAY_ZK_CONNECT=$IP:2181,$IP:2182,$IP:2183" in head_only
    assert "boto3" in head_only  # the head's autoscaler launches the workers
    assert "KRAY_ZK_CONNECT=$RAY_HEAD_IP:2181,$RAY_HEAD_IP:2182,$RAY_HEAD_IP:2183" in \
        "\n".join(raw["worker_setup_commands"])

    # Ray's standard start commands.
    head_start = "\n".join(config["head_start_ray_commands"])
    assert config["head_start_ray_commands"][0] == "ray stop"
    assert "ray start --head --port=6379" in head_start
    assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in head_start
    assert "--dashboard-host=0.0.0.0" in head_start
    assert config["worker_start_ray_commands"][0] == "ray stop"
    assert "ray start --address=$RAY_HEAD_IP:6379" in "\n".join(config["worker_start_ray_commands"])
    # with the environment kray's actors expect of Ray's workers, on every node
    from actors.runtime import RAY_WORKER_ENV
    env = " ".join(f"{k}={v}" for k, v in RAY_WORKER_ENV.items())
    assert all(f"{env} ray start" in cmd for cmd in config["head_start_ray_commands"][1:]
               + config["worker_start_ray_commands"][1:])


def test_every_command_is_valid_bash():
    """YAML folding and quoting must leave each command parseable by bash."""
    raw = load_raw()
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
