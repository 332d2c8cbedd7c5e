"""What the tests of the broker's ReplicaManager share (test_controller_requests.py, test_metadata_cache.py,
test_replica_manager.py): the broker, its epoch and partitions, the controller's requests to it, and a
ReplicaManager with its logs in a temporary directory, batches and fetches (test_fetcher.py,
test_broker_events.py and test_log_dirs.py use them too). Not a test module: pytest does not collect it."""
from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from actors.broker.log.log_config import LogConfig
from actors.broker.replica_manager import ReplicaManager
from actors.config import BrokerConfig
from actors.data_protocol import FetchParams
from actors.protocol import LeaderAndIsrRequest, PartitionState, StopReplicaRequest
from coordination.zkdata import TopicPartition

BROKER = 1
BROKER_EPOCH = 500
MAX_BYTES = BrokerConfig().message_max_bytes
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
T2 = TopicPartition("t", 2)


def ps(tp, leader, leader_epoch, isr=(1, 2, 3), replicas=(1, 2, 3), controller_epoch=1, zk_version=0):
    return PartitionState(topic=tp.topic, partition=tp.partition, controller_epoch=controller_epoch, leader=leader,
                          leader_epoch=leader_epoch, isr=tuple(isr), zk_version=zk_version, replicas=tuple(replicas))


def lai(*states, controller_epoch=1, broker_epoch=BROKER_EPOCH, controller_id=9):
    return LeaderAndIsrRequest(controller_id=controller_id, controller_epoch=controller_epoch,
                               broker_epoch=broker_epoch, partition_states=list(states), live_leaders=[])


def stop(*partitions, controller_epoch=1, broker_epoch=BROKER_EPOCH):
    return StopReplicaRequest(controller_id=9, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
                              partitions=list(partitions))


def errors(response):
    return {TopicPartition(e.topic, e.partition): e.error_code for e in response.partition_errors}


CONFIG_FOR = lambda topic: LogConfig.from_overrides(BrokerConfig(), {})  # noqa: E731


def follower_epoch(broker_id: int) -> int:
    """The broker epoch of broker N's live incarnation, in these tests."""
    return 700 + broker_id


@pytest.fixture
def rm(tmp_path):
    return ReplicaManager(BROKER, tmp_path, CONFIG_FOR, alive_broker_epoch=follower_epoch)


def batch(n: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        builder.append(i, timestamp=1_000, key=None, value=f"v{i}".encode(), headers=[])
    return bytes(builder.build())


def fetch(replica_id=2, partitions=(), max_wait_ms=0, session_id=0, session_epoch=-1, forgotten=(),
          replica_epoch=None):
    """A fetch by follower `replica_id`'s live incarnation (or the one `replica_epoch` names), or a consumer's."""
    return FetchParams(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=MAX_BYTES,
                       partitions=list(partitions), session_id=session_id, session_epoch=session_epoch,
                       forgotten=list(forgotten), replica_epoch=follower_epoch(replica_id) if replica_epoch is None
                       and replica_id >= 0 else -1 if replica_epoch is None else replica_epoch)
