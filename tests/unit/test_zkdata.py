"""coordination.zkdata: Kafka's znode JSON round-trips, malformed data, and paths."""
from __future__ import annotations

import base64
import json
import re

import pydantic
import pytest

from coordination import zkdata
from coordination.errors import Errors, MalformedZNodeError
from coordination.zkdata import (
    BrokerIdZNode,
    ControllerZNode,
    IsrChangeNotificationZNode,
    PartitionStateZNode,
    PreferredReplicaElectionZNode,
    ReassignPartitionsZNode,
    TopicConfigZNode,
    TopicPartition,
    TopicZNode,
    decode,
)

TOPIC_ID = "ZXjEnJ2jQcaIEMt3_nOHBQ"

# Kafka's documented znode contents (ZkData.scala comments and the Kafka docs)
PARTITION_STATE = {"controller_epoch": 29, "leader": 2, "version": 1, "leader_epoch": 48, "isr": [2]}
CONTROLLER = {"version": 1, "brokerid": 8, "timestamp": "1608173427409"}
BROKER_V5 = {"features": {}, "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
             "endpoints": ["PLAINTEXT://host1:9092"], "jmx_port": 9999, "host": "host1",
             "timestamp": "2233345666", "port": 9092, "version": 5}
BROKER_V4 = {"version": 4, "host": "localhost", "port": 9092, "jmx_port": 9999, "timestamp": "2233345666",
             "endpoints": ["CLIENT://host1:9092", "REPLICATION://host1:9093"], "rack": "dc1",
             "listener_security_protocol_map": {"CLIENT": "SSL", "REPLICATION": "PLAINTEXT"}}
TOPIC_V2 = {"version": 2, "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]}, "adding_replicas": {},
            "removing_replicas": {}, "topic_id": TOPIC_ID}
TOPIC_V1 = {"version": 1, "partitions": {"0": [1, 2, 3]}}
REASSIGN = {"version": 1, "partitions": [{"topic": "foo", "partition": 1, "replicas": [1, 2, 3]}]}
PARTITION_REFS = {"version": 1, "partitions": [{"topic": "t", "partition": 0}]}
TOPIC_CONFIG = {"version": 1, "config": {"cleanup.policy": "compact"}}

ROUND_TRIPS = [
    (PartitionStateZNode, PARTITION_STATE, {}),
    (ControllerZNode, CONTROLLER, {}),
    (BrokerIdZNode, BROKER_V5, {}),
    (BrokerIdZNode, BROKER_V4, {"features": {}}),
    (TopicZNode, TOPIC_V2, {}),
    (TopicZNode, TOPIC_V1, {"adding_replicas": {}, "removing_replicas": {}}),
    (ReassignPartitionsZNode, REASSIGN, {}),
    (PreferredReplicaElectionZNode, PARTITION_REFS, {}),
    (IsrChangeNotificationZNode, PARTITION_REFS, {}),
    (TopicConfigZNode, TOPIC_CONFIG, {}),
]


@pytest.mark.parametrize("model,document,defaults", ROUND_TRIPS,
                         ids=[f"{m.__name__}-{i}" for i, (m, _, _) in enumerate(ROUND_TRIPS)])
def test_round_trip(model, document, defaults):
    raw = json.dumps(document).encode()
    parsed = decode(model, "/some/path", raw)
    encoded = json.loads(parsed.encode())
    # everything Kafka wrote comes back unchanged; anything added is a default
    assert encoded == {**document, **defaults}
    # and the encoding parses again to an equal model
    assert decode(model, "/some/path", parsed.encode()) == parsed


def test_partition_state_fields():
    st = decode(PartitionStateZNode, "/p", json.dumps(PARTITION_STATE).encode())
    assert (st.version, st.leader, st.leader_epoch, st.controller_epoch, st.isr) == (1, 2, 48, 29, [2])


def test_controller_fields():
    c = decode(ControllerZNode, "/controller", json.dumps(CONTROLLER).encode())
    assert (c.version, c.brokerid, c.timestamp) == (1, 8, "1608173427409")


def test_controller_encode_defaults():
    doc = json.loads(ControllerZNode(brokerid=3).encode())
    assert doc["version"] == 1 and doc["brokerid"] == 3
    assert isinstance(doc["timestamp"], str) and doc["timestamp"].isdigit()  # Kafka writes a string


def test_broker_v5_fields():
    b = decode(BrokerIdZNode, "/brokers/ids/1", json.dumps(BROKER_V5).encode())
    assert (b.version, b.host, b.port, b.jmx_port, b.rack) == (5, "host1", 9092, 9999, None)
    assert b.endpoints == ["PLAINTEXT://host1:9092"]


def test_broker_v4_with_rack():
    b = decode(BrokerIdZNode, "/brokers/ids/1", json.dumps(BROKER_V4).encode())
    assert b.rack == "dc1"
    assert b.version == 4
    assert b.listener_security_protocol_map == {"CLIENT": "SSL", "REPLICATION": "PLAINTEXT"}


def test_broker_plaintext_registration_encoding():
    doc = json.loads(BrokerIdZNode.plaintext("h", 9093).encode())
    assert doc["version"] == 5
    assert doc["endpoints"] == ["PLAINTEXT://h:9093"]
    assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert doc["jmx_port"] == -1
    assert doc["features"] == {}
    assert "rack" not in doc  # None is left out, as Kafka does for a broker without a rack
    assert json.loads(BrokerIdZNode.plaintext("h", 9093, rack="r1").encode())["rack"] == "r1"


def test_broker_registration_of_several_listeners():
    """Kafka writes every advertised listener in `endpoints`, with the first PLAINTEXT one as the
    old clients' host and port."""
    b = BrokerIdZNode.of_listeners({"PLAINTEXT": ("h", 9093), "REPLICATION": ("h", 41000)}, rack="r1")
    doc = json.loads(b.encode())
    assert (doc["host"], doc["port"]) == ("h", 9093)
    assert doc["endpoints"] == ["PLAINTEXT://h:9093", "REPLICATION://h:41000"]
    assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "REPLICATION": "PLAINTEXT"}
    assert decode(BrokerIdZNode, "/brokers/ids/1", b.encode()).listeners() == {
        "PLAINTEXT": ("h", 9093), "REPLICATION": ("h", 41000)}
    v4 = decode(BrokerIdZNode, "/brokers/ids/1", json.dumps(BROKER_V4).encode())
    assert v4.listeners() == {"CLIENT": ("host1", 9092), "REPLICATION": ("host1", 9093)}
    ipv6 = BrokerIdZNode(host="::1", port=9092, endpoints=["PLAINTEXT://[::1]:9092"])
    assert ipv6.listeners() == {"PLAINTEXT": ("::1", 9092)}


@pytest.mark.parametrize("endpoint", ["host1:9092", "PLAINTEXT://host1", "PLAINTEXT://host1:port", "://h:1"])
def test_broker_endpoint_that_does_not_parse(endpoint):
    doc = {**BROKER_V5, "endpoints": [endpoint]}
    err = _malformed(BrokerIdZNode, json.dumps(doc).encode(), "/brokers/ids/1")
    assert "LISTENER://host:port" in str(err)


def test_unknown_keys_from_newer_kafka_are_ignored():
    doc = {**PARTITION_STATE, "leader_recovery_state": 0}
    st = decode(PartitionStateZNode, "/p", json.dumps(doc).encode())
    assert st.leader == 2
    assert "leader_recovery_state" not in json.loads(st.encode())


def test_topic_assignment_and_id():
    t = decode(TopicZNode, "/brokers/topics/t", json.dumps(TOPIC_V2).encode())
    assert t.assignment() == {0: [1, 2, 3], 1: [2, 3, 1]}
    assert t.topic_id == TOPIC_ID
    t1 = decode(TopicZNode, "/brokers/topics/t", json.dumps(TOPIC_V1).encode())
    assert t1.version == 1 and t1.topic_id is None
    assert t1.assignment() == {0: [1, 2, 3]}


def test_topic_from_assignment():
    z = TopicZNode.from_assignment({1: [2, 3], 0: [3, 2], 10: [1, 2]}, TOPIC_ID)
    doc = json.loads(z.encode())
    assert doc == {"version": 2, "partitions": {"0": [3, 2], "1": [2, 3], "10": [1, 2]},
                   "adding_replicas": {}, "removing_replicas": {}, "topic_id": TOPIC_ID}
    assert z.assignment() == {0: [3, 2], 1: [2, 3], 10: [1, 2]}
    assert "topic_id" not in json.loads(TopicZNode.from_assignment({0: [1]}, None).encode())


def test_reassignment_and_refs_fields():
    r = decode(ReassignPartitionsZNode, "/admin/reassign_partitions", json.dumps(REASSIGN).encode())
    assert [(p.topic, p.partition, p.replicas) for p in r.partitions] == [("foo", 1, [1, 2, 3])]
    e = decode(PreferredReplicaElectionZNode, "/x", json.dumps(PARTITION_REFS).encode())
    assert [(p.topic, p.partition) for p in e.partitions] == [("t", 0)]
    i = decode(IsrChangeNotificationZNode, "/x", json.dumps(PARTITION_REFS).encode())
    assert [(p.topic, p.partition) for p in i.partitions] == [("t", 0)]


def test_topic_config_default_is_empty():
    assert json.loads(TopicConfigZNode().encode()) == {"version": 1, "config": {}}
    c = decode(TopicConfigZNode, "/config/topics/t", json.dumps(TOPIC_CONFIG).encode())
    assert c.config == {"cleanup.policy": "compact"}


# -- malformed data ------------------------------------------------------------------------------

PATH = "/brokers/topics/t/partitions/0/state"


def _malformed(model, data, path=PATH) -> MalformedZNodeError:
    with pytest.raises(MalformedZNodeError) as e:
        decode(model, path, data)
    assert e.value.path == path
    assert e.value.error == Errors.CORRUPT_MESSAGE
    assert f"malformed data at {path}" in str(e.value)
    return e.value


@pytest.mark.parametrize("data", [
    b"not json", b"{", b"", None, b"   ", b"[]", b"null", b"42", b'"text"', b"\xff\xfe\x00",
    json.dumps(PARTITION_STATE).encode() + b" trailing",
])
def test_garbage_partition_state(data):
    _malformed(PartitionStateZNode, data)


def test_empty_and_none_say_empty():
    assert "empty znode" in str(_malformed(PartitionStateZNode, b""))
    assert "empty znode" in str(_malformed(PartitionStateZNode, None))


@pytest.mark.parametrize("field", ["leader", "leader_epoch", "controller_epoch", "isr"])
def test_missing_field(field):
    doc = {k: v for k, v in PARTITION_STATE.items() if k != field}
    err = _malformed(PartitionStateZNode, json.dumps(doc).encode())
    assert f"at {PATH}: {field}: Field required" in str(err)


@pytest.mark.parametrize("field,value", [
    ("leader", "2"), ("leader", 2.0), ("leader", True), ("leader", None), ("isr", [2, "3"]), ("isr", 2),
    ("leader_epoch", "48"), ("controller_epoch", [29]),
])
def test_wrong_type(field, value):
    doc = {**PARTITION_STATE, field: value}
    err = _malformed(PartitionStateZNode, json.dumps(doc).encode())
    assert re.search(rf"at {re.escape(PATH)}: {field}[.:]", str(err)), str(err)


def test_controller_wrong_types():
    _malformed(ControllerZNode, b'{"version":1,"brokerid":"8","timestamp":"1"}', "/controller")
    _malformed(ControllerZNode, b'{"version":1,"timestamp":"1"}', "/controller")


def test_broker_missing_host():
    doc = {k: v for k, v in BROKER_V5.items() if k != "host"}
    _malformed(BrokerIdZNode, json.dumps(doc).encode(), "/brokers/ids/1")


@pytest.mark.parametrize("key", ["x", "-1", "", "1.0", " 1"])
def test_topic_partition_id_not_an_integer(key):
    doc = {"version": 2, "partitions": {"0": [1], key: [2]}}
    err = _malformed(TopicZNode, json.dumps(doc).encode(), "/brokers/topics/t")
    assert "partition id" in str(err)


def test_topic_replicas_wrong_type():
    _malformed(TopicZNode, b'{"version":2,"partitions":{"0":["1"]}}', "/brokers/topics/t")
    _malformed(TopicZNode, b'{"version":2,"partitions":[[1]]}', "/brokers/topics/t")


def test_topic_partition_id_unicode_superscript_digit():
    data = json.dumps({"version": 2, "partitions": {"\u00b2": [1]}}).encode()
    try:
        znode = decode(TopicZNode, "/brokers/topics/t", data)
    except MalformedZNodeError:
        return  # the correct behaviour: callers skip malformed znodes
    # if decode accepted it, the model must at least be usable
    znode.assignment()


def test_reassignment_malformed():
    _malformed(ReassignPartitionsZNode, b'{"version":1,"partitions":[{"topic":"foo","partition":1}]}', "/r")
    _malformed(ReassignPartitionsZNode, b'{"version":1,"partitions":{"foo":1}}', "/r")


def test_partition_refs_malformed():
    _malformed(IsrChangeNotificationZNode, b'{"version":1,"partitions":[{"topic":"t","partition":"0"}]}', "/i")
    _malformed(PreferredReplicaElectionZNode, b'{"version":1,"partitions":[{"partition":0}]}', "/e")


def test_topic_config_values_must_be_strings():
    _malformed(TopicConfigZNode, b'{"version":1,"config":{"retention.ms":1000}}', "/config/topics/t")


def test_error_message_has_preview_of_data():
    err = _malformed(PartitionStateZNode, b"garbage-bytes")
    assert "garbage-bytes" in str(err)


def test_models_are_frozen():
    st = decode(PartitionStateZNode, "/p", json.dumps(PARTITION_STATE).encode())
    with pytest.raises(pydantic.ValidationError):
        st.leader = 5
    assert st.leader == 2


# -- controller epoch ------------------------------------------------------------------------------

@pytest.mark.parametrize("epoch", [0, 1, 29, 2**31 - 1])
def test_controller_epoch_round_trip(epoch):
    raw = zkdata.encode_controller_epoch(epoch)
    assert raw == str(epoch).encode()
    assert zkdata.decode_controller_epoch(zkdata.CONTROLLER_EPOCH, raw) == epoch


@pytest.mark.parametrize("data", [b"", None, b"abc", b"1.5", b"\xff\xfe", b"{}", b"0x10", b"1e3"])
def test_controller_epoch_garbage(data):
    with pytest.raises(MalformedZNodeError) as e:
        zkdata.decode_controller_epoch(zkdata.CONTROLLER_EPOCH, data)
    assert e.value.path == "/controller_epoch"
    assert "not an integer" in str(e.value)


# -- paths ----------------------------------------------------------------------------------------

def test_paths():
    tp = TopicPartition("t", 0)
    assert zkdata.partition_state_path(tp) == "/brokers/topics/t/partitions/0/state"
    assert zkdata.topic_partition_path(TopicPartition("t", 7)) == "/brokers/topics/t/partitions/7"
    assert zkdata.topic_partitions_path("t") == "/brokers/topics/t/partitions"
    assert zkdata.topic_path("my.topic") == "/brokers/topics/my.topic"
    assert zkdata.broker_path(3) == "/brokers/ids/3"
    assert zkdata.topic_config_path("t") == "/config/topics/t"
    assert zkdata.delete_topic_path("t") == "/admin/delete_topics/t"


def test_path_constants_match_kafka():
    assert zkdata.CONTROLLER == "/controller"
    assert zkdata.CONTROLLER_EPOCH == "/controller_epoch"
    assert zkdata.BROKER_IDS == "/brokers/ids"
    assert zkdata.TOPICS == "/brokers/topics"
    assert zkdata.BROKER_SEQUENCE_ID == "/brokers/seqid"
    assert zkdata.CONFIG_TOPICS == "/config/topics"
    assert zkdata.CONFIG_CHANGES == "/config/changes"
    assert zkdata.DELETE_TOPICS == "/admin/delete_topics"
    assert zkdata.REASSIGN_PARTITIONS == "/admin/reassign_partitions"
    assert zkdata.PREFERRED_REPLICA_ELECTION == "/admin/preferred_replica_election"
    assert zkdata.ISR_CHANGE_NOTIFICATION == "/isr_change_notification"
    assert zkdata.ISR_CHANGE_PREFIX == "isr_change_"


def test_persistent_paths_include_kafkas():
    for path in ["/consumers", "/brokers/ids", "/brokers/topics", "/config/changes", "/admin/delete_topics",
                 "/brokers/seqid", "/isr_change_notification", "/latest_producer_id_block",
                 "/log_dir_event_notification", "/config/topics", "/config/clients", "/config/users",
                 "/config/brokers"]:
        assert path in zkdata.PERSISTENT_PATHS, path


def test_topic_partition_str_and_tuple():
    tp = TopicPartition("orders", 3)
    assert str(tp) == "orders-3"
    assert tp == ("orders", 3)
    assert tp.topic == "orders" and tp.partition == 3


# -- topic ids ------------------------------------------------------------------------------------

def test_new_topic_id_shape():
    ids = [zkdata.new_topic_id() for _ in range(500)]
    assert len(set(ids)) == 500
    for tid in ids:
        assert len(tid) == 22
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", tid), tid
        raw = base64.urlsafe_b64decode(tid + "==")
        assert len(raw) == 16


def test_controller_epoch_with_underscore_is_garbage():
    with pytest.raises(MalformedZNodeError):
        zkdata.decode_controller_epoch(zkdata.CONTROLLER_EPOCH, b"1_0")


@pytest.mark.parametrize("leader,leader_epoch,controller_epoch,isr", [
    (1, 0, 1, [1, 2, 3]), (-1, 17, 4, [5]), (2, 2**31 - 1, 99, []), (1001, 3, 2, (3, 1001, 7))])
def test_partition_state_fast_encoding_is_the_model_encoding(leader, leader_epoch, controller_epoch, isr):
    from coordination.zkdata import PartitionStateZNode
    fast = PartitionStateZNode.encode_fields(leader, leader_epoch, controller_epoch, isr)
    model = PartitionStateZNode(leader=leader, leader_epoch=leader_epoch, controller_epoch=controller_epoch,
                                isr=list(isr))
    assert fast == model.encode()
    assert PartitionStateZNode.model_validate_json(fast) == model
