"""What a node of a kray Ray cluster runs at its start (`jobs.node`): its ensemble members' configs,
the connect string, and Ray's start command."""
import socket
import sys
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config

from coordination.server import EnsembleMember, ZooKeeperNodeServer, ensemble_connect_string
from jobs.experiments.local import nodes_expected
from jobs.node import ensemble, java_major, main, ray_start_command, start_zookeeper

RAY = str(Path(sys.executable).parent / "ray")
REPO = Path(__file__).resolve().parents[2]


def test_members_are_hosts_with_zookeepers_ports_or_all_four_fields():
    assert ensemble("10.0.0.11, 10.0.0.12:2182:2889:3889,") == [
        EnsembleMember(host="10.0.0.11"), EnsembleMember(host="10.0.0.12", client_port=2182, quorum_port=2889,
                                                         election_port=3889)]
    for bad in ("a:1", "a:1:2", ":2181:2888:3888", "a:x:2:3"):
        with pytest.raises(ValueError):
            ensemble(bad)
    assert ensemble_connect_string(ensemble("a,b:2182:1:2")) == "a:2181,b:2182"
    assert ensemble("HEAD:2181:2888:3888,HEAD:2182:2889:3889", head="10.0.0.5") == [
        EnsembleMember(host="10.0.0.5"), EnsembleMember(host="10.0.0.5", client_port=2182, quorum_port=2889,
                                                        election_port=3889)]


def test_a_members_config_names_every_member_and_takes_clients_on_every_interface(tmp_path):
    members = ensemble("10.0.0.11,10.0.0.12,10.0.0.13")
    server = ZooKeeperNodeServer(members, 2, tmp_path / "zk2").servers[0]
    config = server.config_file.read_text().splitlines()
    assert "clientPort=2181" in config and not any(line.startswith("clientPortAddress") for line in config)
    assert config[-3:] == ["server.1=10.0.0.11:2888:3888", "server.2=10.0.0.12:2888:3888", "server.3=10.0.0.13:2888:3888"]
    assert (tmp_path / "zk2" / "data" / "myid").read_text() == "2\n"
    assert f"dataDir={tmp_path / 'zk2' / 'data'}" in config


def test_a_node_starts_only_the_members_at_its_own_addresses_that_no_server_answers_for(tmp_path):
    assert start_zookeeper(ensemble("10.0.0.11,10.0.0.12,10.0.0.13"), ["192.168.1.5"], tmp_path) == []
    with socket.create_server(("127.0.0.1", 0)) as running:  # what answers on a member's own address and port
        port = running.getsockname()[1]
        assert start_zookeeper(ensemble(f"127.0.0.1:{port}:1:2,10.0.0.12"), ["127.0.0.1"], tmp_path) == [
            f"ZooKeeper server 1 already running on 127.0.0.1:{port}"]
    assert not list(tmp_path.iterdir())


def test_the_java_on_path_is_read_as_its_major_version():
    assert java_major() >= 17  # this machine's (make setup checks it)


def test_ray_starts_with_the_nodes_address_and_the_resources_given():
    assert ray_start_command(True, None, "10.0.0.11", 2, None, 256, ["--include-dashboard=false"]) == [
        RAY, "start", "--head", "--port=6379", "--node-ip-address=10.0.0.11", "--disable-usage-stats", "--num-cpus=2",
        "--object-store-memory=256", "--include-dashboard=false"]
    assert ray_start_command(False, "10.0.0.11:6379", "10.0.0.12", None, None, None, []) == [
        RAY, "start", "--address=10.0.0.11:6379", "--node-ip-address=10.0.0.12", "--disable-usage-stats"]


def test_the_connect_command_prints_kray_zk_connects_value_and_a_bad_member_is_one_line(capsys):
    assert main(["connect", "--ensemble", "a,b,c"]) == 0
    assert capsys.readouterr().out == "a:2181,b:2181,c:2181\n"
    assert main(["connect", "--ensemble", "HEAD:2182:2889:3889"]) == 0  # on the head: its own address
    assert capsys.readouterr().out.split(":")[0] not in ("HEAD", "")
    assert main(["connect", "--ensemble", "a:1"]) == 1
    assert capsys.readouterr().err == "Error: --ensemble: 'a:1': a member is host or host:client:quorum:election\n"



def test_a_jobs_cluster_is_complete_with_its_head_and_every_worker_ray_up_starts():
    local = yaml.safe_load((REPO / "cluster-local.yaml").read_text())
    assert nodes_expected(local) == nodes_expected(prepare_config(local)) == 3  # one node type, the head's too
    cloud = prepare_config(yaml.safe_load((REPO / "cluster.yaml").read_text()))  # as it lies on the head
    assert nodes_expected(cloud) == 4
    assert nodes_expected({"available_node_types": {"head": {"min_workers": 0}, "w": {"min_workers": 2},
                                                    "v": {}}, "head_node_type": "head"}) == 3
    assert nodes_expected({}) == 1
