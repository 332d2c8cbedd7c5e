"""Kafka's KafkaApis: each wire request (kafka-python's classes, generated from Kafka's JSON message
definitions) turned into calls on the replica manager and the metadata cache, and the answers back
into the response of the request's version.

Runs on the broker's event loop; a connection's requests start in order (the SocketServer's).
Produce and Fetch requests arrive as `wire` reads them (ProduceParams, FetchParams), every other
request as kafka-python's object; the responses of the replication round (Produce v9, Fetch v12)
are written by `wire`, the rest by kafka-python.
The admin API's requests are admin_apis.py's, the group coordinator's group_apis.py's. ApiVersions is
the SocketServer's own. Producer ids come in blocks from ZooKeeper, claimed off the loop.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse

from actors.broker.network import wire
from actors.broker.network.admin_apis import AdminApis
from actors.broker.network.group_apis import GroupApis
from actors.broker.group.group_records import GROUP_METADATA_TOPIC
from actors.broker.metadata_cache import MetadataCache
from actors.broker.network.network import CloseConnection, RequestContext
from actors.broker.replica_manager import ReplicaManager
from actors.data_protocol import FetchParams, FetchResult, ProduceParams, ProduceResult
from coordination.errors import Errors, KrayError
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)

NO_LEADER = -1


class KafkaApis:
    def __init__(self, broker_id: int, replica_manager: ReplicaManager, metadata_cache: MetadataCache,
                 cluster_id: Callable[[], str | None], producer_id: Callable[[], int], admin: AdminApis | None = None,
                 groups: GroupApis | None = None):
        self.broker_id = broker_id
        self.rm, self.cache = replica_manager, metadata_cache
        self.cluster_id = cluster_id
        self.producer_id = producer_id  # blocking (ZooKeeper, once a block): called off the loop
        self._handlers = {ProduceRequest.API_KEY: self.produce, FetchRequest.API_KEY: self.fetch,
                          ListOffsetsRequest.API_KEY: self.list_offsets, MetadataRequest.API_KEY: self.metadata,
                          OffsetForLeaderEpochRequest.API_KEY: self.offset_for_leader_epoch,
                          InitProducerIdRequest.API_KEY: self.init_producer_id,
                          **(admin.handlers if admin is not None else {}),
                          **(groups.handlers if groups is not None else {})}

    async def handle(self, ctx: RequestContext, request):
        return await self._handlers[ctx.api_key](ctx, request)

    # -- Metadata ------------------------------------------------------------

    async def metadata(self, ctx: RequestContext, request) -> MetadataResponse:
        """From the metadata cache, which only UpdateMetadata fills (as Kafka's), with each broker's
        endpoint on the listener the request came in on. A leader the cache does not know alive is
        answered as none, LEADER_NOT_AVAILABLE (Kafka's getPartitionMetadata), so that a client keeps
        asking rather than waits on a dead broker; one alive without that listener as none,
        LISTENER_NOT_FOUND (v6 on; before, LEADER_NOT_AVAILABLE), and left out of the brokers."""
        snapshot = self.cache.snapshot
        nodes = {b.id: node for b in snapshot.alive_brokers.values() if (node := b.node(ctx.listener)) is not None}
        no_listener = Errors.LISTENER_NOT_FOUND if ctx.api_version >= 6 else Errors.LEADER_NOT_AVAILABLE
        by_topic: dict[str, list] = {}
        for tp, st in snapshot.partitions.items():
            by_topic.setdefault(tp.topic, []).append(st)
        every = request.topics is None or ctx.api_version == 0 and not request.topics  # v0: [] meant all
        wanted = sorted(by_topic) if every else [t.name for t in request.topics]
        R = MetadataResponse
        topics = []
        for name in wanted:
            states = by_topic.get(name)
            if not states:
                topics.append(R.MetadataResponseTopic(error_code=int(Errors.UNKNOWN_TOPIC_OR_PARTITION), name=name,
                                                      is_internal=False, partitions=[]))
                continue
            partitions = [R.MetadataResponseTopic.MetadataResponsePartition(
                error_code=int(Errors.NONE if st.leader in nodes else
                               no_listener if st.leader in snapshot.alive_brokers else Errors.LEADER_NOT_AVAILABLE),
                partition_index=st.partition,
                leader_id=st.leader if st.leader in nodes else NO_LEADER,
                leader_epoch=st.leader_epoch, replica_nodes=list(st.replicas), isr_nodes=list(st.isr),
                offline_replicas=list(st.offline_replicas)) for st in sorted(states, key=lambda s: s.partition)]
            topics.append(R.MetadataResponseTopic(error_code=0, name=name, is_internal=name == GROUP_METADATA_TOPIC,
                                                  partitions=partitions))
        return R(throttle_time_ms=0, brokers=[R.MetadataResponseBroker(node_id=b.id, host=b.host, port=b.port,
                                                                      rack=b.rack)
                                              for _, b in sorted(nodes.items())],
                 cluster_id=self.cluster_id(), controller_id=snapshot.controller_id
                 if snapshot.controller_id is not None else -1, topics=topics)

    # -- Produce -------------------------------------------------------------

    async def produce(self, ctx: RequestContext, request: ProduceParams) -> ProduceResponse | bytes | None:
        """acks=0 gets no answer; if its append failed the connection is closed, as Kafka does, so that
        the producer notices."""
        if request.transactional_id is not None:
            results = [ProduceResult(tp.topic, tp.partition, int(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                                     error_message="kray has no transaction coordinator") for tp, _ in request.entries]
        else:
            results = await self.rm.append_records(request.acks, request.timeout_ms, request.entries)
        if request.acks == 0:
            if any(r.error_code != Errors.NONE for r in results):
                raise CloseConnection(f"acks=0 produce failed: {[(r.topic, r.partition, Errors(r.error_code).name) for r in results if r.error_code]}")
            return None
        if ctx.api_version == wire.PRODUCE_VERSION:
            return wire.produce_response(ctx.correlation_id, results)
        return produce_response(results)

    # -- Fetch ---------------------------------------------------------------

    async def fetch(self, ctx: RequestContext, params: FetchParams) -> FetchResponse | bytes:
        """Kafka's handleFetchRequest: from v11 the request carries client metadata (KIP-392), with which
        a consumer may fetch from a follower."""
        result = await self.rm.fetch(params, client_metadata=ctx.api_version >= 11)
        if ctx.api_version == wire.FETCH_VERSION:
            return wire.fetch_response(ctx.correlation_id, result.error_code, result.session_id, result.partitions)
        return fetch_response(result)

    # -- offsets -------------------------------------------------------------

    async def list_offsets(self, ctx: RequestContext, request) -> ListOffsetsResponse:
        """v0 (still Kafka 2.8's, and what older tools send) answers a list of offsets, at most
        max_num_offsets: the earliest or the latest, or for a timestamp the first offset at or after it
        (where Kafka 2.8 lists the segments' base offsets older than it)."""
        R = ListOffsetsResponse
        topics = []
        for t in request.topics:
            partitions = []
            for p in t.partitions:
                try:
                    timestamp, offset, epoch = self.rm.list_offset(TopicPartition(t.name, p.partition_index),
                                                                   p.timestamp, p.current_leader_epoch,
                                                                   request.replica_id)
                    error = Errors.NONE
                except KrayError as e:
                    timestamp, offset, epoch, error = -1, -1, -1, e.error
                partitions.append(R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index, error_code=int(error), timestamp=timestamp, offset=offset,
                    leader_epoch=epoch, old_style_offsets=[offset][:p.max_num_offsets] if offset >= 0 else []))
            topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=partitions))
        return R(throttle_time_ms=0, topics=topics)

    async def offset_for_leader_epoch(self, ctx: RequestContext, request) -> OffsetForLeaderEpochResponse:
        R = OffsetForLeaderEpochResponse
        answers = self.rm.offsets_for_leader_epoch((t.topic, p.partition, p.current_leader_epoch, p.leader_epoch)
                                                   for t in request.topics for p in t.partitions)
        by_topic: dict[str, list] = {}
        for a in answers:
            by_topic.setdefault(a.topic, []).append(R.OffsetForLeaderTopicResult.EpochEndOffset(
                error_code=a.error_code, partition=a.partition, leader_epoch=a.leader_epoch, end_offset=a.end_offset))
        return R(throttle_time_ms=0, topics=[R.OffsetForLeaderTopicResult(topic=t, partitions=ps)
                                             for t, ps in by_topic.items()])

    # -- idempotent producers ------------------------------------------------

    async def init_producer_id(self, ctx: RequestContext, request) -> InitProducerIdResponse:
        """A new producer id, epoch 0 (an idempotent producer without transactions); a transactional id
        needs a transaction coordinator, which kray does not have."""
        if request.transactional_id is not None:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=int(Errors.COORDINATOR_NOT_AVAILABLE),
                                          producer_id=-1, producer_epoch=-1)
        try:
            producer_id = await asyncio.get_running_loop().run_in_executor(None, self.producer_id)
        except Exception as e:  # ZooKeeper unreachable: the producer retries
            log.warning("[KafkaApi-%d] Could not allocate a producer id: %s: %s", self.broker_id, type(e).__name__, e)
            return InitProducerIdResponse(throttle_time_ms=0, error_code=int(Errors.COORDINATOR_NOT_AVAILABLE),
                                          producer_id=-1, producer_epoch=-1)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)


def produce_response(results: list[ProduceResult]) -> ProduceResponse:
    """kafka-python's ProduceResponse of the results (every version but wire.PRODUCE_VERSION's)."""
    R = ProduceResponse
    by_topic: dict[str, list] = {}
    for r in results:
        by_topic.setdefault(r.topic, []).append(R.TopicProduceResponse.PartitionProduceResponse(
            index=r.partition, error_code=r.error_code, base_offset=r.base_offset, log_append_time_ms=-1,
            log_start_offset=r.log_start_offset, record_errors=[], error_message=r.error_message))
    return R(responses=[R.TopicProduceResponse(name=t, partition_responses=ps) for t, ps in by_topic.items()],
             throttle_time_ms=0)


def fetch_response(result: FetchResult) -> FetchResponse:
    """kafka-python's FetchResponse of the result (every version but wire.FETCH_VERSION's)."""
    R = FetchResponse
    P = R.FetchableTopicResponse.PartitionData
    by_topic: dict[str, list] = {}
    for f in result.partitions:
        data = P(partition_index=f.partition, error_code=f.error_code, high_watermark=f.high_watermark,
                 last_stable_offset=f.high_watermark, log_start_offset=f.log_start_offset,
                 aborted_transactions=None, preferred_read_replica=-1, records=f.records)
        if f.diverging_epoch is not None:
            data.diverging_epoch = P.EpochEndOffset(epoch=f.diverging_epoch[0], end_offset=f.diverging_epoch[1])
        by_topic.setdefault(f.topic, []).append(data)
    return R(throttle_time_ms=0, error_code=result.error_code, session_id=result.session_id,
             responses=[R.FetchableTopicResponse(topic=t, partitions=ps) for t, ps in by_topic.items()])
