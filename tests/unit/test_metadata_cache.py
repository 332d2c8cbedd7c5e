"""The broker's MetadataCache (metadata_cache.py): what UpdateMetadata leaves in it, and the Metadata
answers KafkaApis builds from it (leaders not known alive, the endpoints of the listener asked)."""
from __future__ import annotations

import asyncio

import pytest

from actors.broker.metadata_cache import LEADER_DURING_DELETE, MetadataCache
from actors.protocol import UpdateMetadataRequest
from coordination.errors import Errors
from coordination.zkdata import TopicPartition
from tests.live_brokers import live_broker
from tests.unit.replica_manager_helpers import BROKER, BROKER_EPOCH, T0, T1, ps
from tests.unit.replica_manager_helpers import rm  # noqa: F401 (the fixture)


def um(*states, brokers=(1, 2, 3), controller_id=9):
    return UpdateMetadataRequest(
        controller_id=controller_id, controller_epoch=1, broker_epoch=BROKER_EPOCH, partition_states=list(states),
        live_brokers=[live_broker(b, f"h{b}", 9090 + b) for b in brokers])


def test_metadata_cache_initially_empty():
    cache = MetadataCache()
    assert cache.controller_id is None
    assert cache.alive_brokers == {} and cache.partitions == {}
    assert cache.leader_and_isr() == {}


def test_metadata_cache_stores_states_and_brokers():
    cache = MetadataCache()
    s0 = ps(T0, leader=1, leader_epoch=2, isr=(1, 2))
    deleted = cache.update(um(s0, ps(T1, leader=3, leader_epoch=0, isr=(3,)), controller_id=2))
    assert deleted == []
    assert cache.controller_id == 2
    assert sorted(cache.alive_brokers) == [1, 2, 3]
    assert cache.alive_brokers[2] == live_broker(2, "h2", 9092)
    assert cache.partitions[T0] == s0
    assert cache.leader_and_isr() == {T0: (1, 2, [1, 2]), T1: (3, 0, [3])}


def test_metadata_cache_replaces_live_brokers_and_merges_partitions():
    cache = MetadataCache()
    cache.update(um(ps(T0, leader=1, leader_epoch=0), brokers=(1, 2, 3)))
    cache.update(um(ps(T1, leader=2, leader_epoch=0), brokers=(2, 4), controller_id=4))
    assert sorted(cache.alive_brokers) == [2, 4]
    assert cache.controller_id == 4
    assert set(cache.partitions) == {T0, T1}  # partitions not mentioned are kept
    cache.update(um(ps(T0, leader=3, leader_epoch=1, isr=(3,)), brokers=()))
    assert cache.alive_brokers == {}
    assert cache.leader_and_isr()[T0] == (3, 1, [3])


def test_metadata_cache_knows_which_incarnation_of_each_broker_lives():
    """UpdateMetadata carries each live broker's registration epoch: the leader learns from it which
    brokers died or registered again since the last one (their followers' state is then forgotten)."""
    def update(epochs: dict[int, int]) -> UpdateMetadataRequest:
        return UpdateMetadataRequest(controller_id=9, controller_epoch=1, broker_epoch=BROKER_EPOCH, partition_states=[],
                                     live_brokers=[live_broker(b).model_copy(update={"epoch": e}) for b, e in epochs.items()])
    cache = MetadataCache()
    cache.update(update({1: 10, 2: 20, 3: 30}))
    assert (cache.alive_broker_epoch(2), cache.alive_broker_epoch(4)) == (20, None)
    before = cache.snapshot
    cache.update(update({1: 10, 2: 21, 4: 40}))
    assert cache.incarnations_since(before) == {2: 21, 3: -1}  # 2 bounced, 3 died; 4 is new: nothing to forget
    before = cache.snapshot
    cache.update(update({1: 10, 2: 21, 4: 40}))
    assert cache.incarnations_since(before) == {}


def test_metadata_cache_leader_during_delete_removes_partition():
    assert LEADER_DURING_DELETE == -2
    cache = MetadataCache()
    cache.update(um(ps(T0, leader=1, leader_epoch=0), ps(T1, leader=2, leader_epoch=0)))
    deleted = cache.update(um(ps(T0, leader=-2, leader_epoch=0)))
    assert deleted == [T0]
    assert set(cache.partitions) == {T1}
    assert T0 not in cache.leader_and_isr()


def test_a_topics_partition_count_follows_the_partitions_an_update_adds_changes_and_deletes():
    """Kept as each update's partitions come and go (counting the whole cache again at every
    UpdateMetadata cost as much as the cache is large)."""
    cache = MetadataCache()
    cache.update(um(ps(T0, leader=1, leader_epoch=0), ps(T1, leader=2, leader_epoch=0)))
    cache.update(um(ps(T1, leader=3, leader_epoch=1), ps(TopicPartition("u", 0), leader=1, leader_epoch=0)))
    assert (cache.partition_count("t"), cache.partition_count("u"), cache.partition_count("v")) == (2, 1, 0)
    cache.update(um(ps(T0, leader=-2, leader_epoch=0), ps(T0, leader=-2, leader_epoch=0)))  # deleted twice
    assert (cache.partition_count("t"), cache.partition_count("u")) == (1, 1)


def test_metadata_cache_no_leader_is_kept():
    cache = MetadataCache()
    deleted = cache.update(um(ps(T0, leader=-1, leader_epoch=3, isr=())))
    assert deleted == []
    assert cache.leader_and_isr() == {T0: (-1, 3, [])}


def test_metadata_answers_a_leader_not_known_alive_as_none(rm):
    """Kafka's getPartitionMetadata: a leader missing from the cache's live brokers (it died and the
    election has not reached this broker yet) is answered as -1, LEADER_NOT_AVAILABLE; a client then
    asks again instead of waiting on the dead broker."""
    from kafka.protocol.metadata import MetadataRequest

    from actors.broker.network.kafka_apis import KafkaApis
    from actors.broker.network.network import RequestContext

    cache = MetadataCache()
    cache.update(um(ps(T0, leader=1, leader_epoch=0, isr=(1, 2)), ps(T1, leader=2, leader_epoch=0, isr=(2, 1)),
                    brokers=(1, 2)))
    cache.update(um(brokers=(1,)))  # broker 2 died: only the live brokers, no partition states
    apis = KafkaApis(BROKER, rm, cache, lambda: "cluster", lambda: 0)
    request = MetadataRequest[8](topics=None, allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                 include_topic_authorized_operations=False)
    response = asyncio.run(apis.metadata(RequestContext(3, 8, 1, "c", "peer"), request))
    [topic] = response.topics
    answers = {p.partition_index: (p.leader_id, Errors(p.error_code)) for p in topic.partitions}
    assert answers == {T0.partition: (1, Errors.NONE), T1.partition: (-1, Errors.LEADER_NOT_AVAILABLE)}
    assert [b.node_id for b in response.brokers] == [1]


@pytest.mark.parametrize("version, missing_listener", [(8, Errors.LISTENER_NOT_FOUND),
                                                       (5, Errors.LEADER_NOT_AVAILABLE)])
def test_metadata_answers_the_endpoints_of_the_listener_asked(rm, version, missing_listener):
    """Kafka's getAliveEndpoints: each broker as reached on the listener the request came in on (a
    client on PLAINTEXT gets PLAINTEXT ports, a fetcher on REPLICATION replication's); a broker
    without that listener is left out, and a partition it leads is answered leaderless with
    LISTENER_NOT_FOUND (v6 on; LEADER_NOT_AVAILABLE before)."""
    from kafka.protocol.metadata import MetadataRequest

    from actors.broker.network.kafka_apis import KafkaApis
    from actors.broker.network.network import RequestContext
    from actors.protocol import EndPoint, LiveBroker

    cache = MetadataCache()
    cache.update(UpdateMetadataRequest(
        controller_id=1, controller_epoch=1, broker_epoch=BROKER_EPOCH,
        partition_states=[ps(T0, leader=1, leader_epoch=0, isr=(1, 2)), ps(T1, leader=2, leader_epoch=0, isr=(2, 1))],
        live_brokers=[live_broker(1, "h1", 9091),
                      LiveBroker(id=2, endpoints=[EndPoint("PLAINTEXT", "h2", 9092)])]))  # no REPLICATION
    apis = KafkaApis(BROKER, rm, cache, lambda: "cluster", lambda: 0)

    def ask(listener: str):
        request = MetadataRequest[version](topics=None, allow_auto_topic_creation=False,
                                           include_cluster_authorized_operations=False,
                                           include_topic_authorized_operations=False)
        response = asyncio.run(apis.metadata(RequestContext(3, version, 1, "c", "peer", listener), request))
        leaders = {p.partition_index: (p.leader_id, Errors(p.error_code)) for p in response.topics[0].partitions}
        return [(b.node_id, b.host, b.port) for b in response.brokers], leaders

    assert ask("PLAINTEXT") == ([(1, "h1", 9091), (2, "h2", 9092)], {0: (1, Errors.NONE), 1: (2, Errors.NONE)})
    assert ask("REPLICATION") == ([(1, "h1", 10091)], {0: (1, Errors.NONE), 1: (-1, missing_listener)})
