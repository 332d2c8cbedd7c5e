"""The group API a broker serves (KafkaApis' group requests): FindCoordinator, which makes
`__consumer_offsets` on first use, and the requests of the group protocol and of committed offsets,
handed to the group coordinator with Kafka 2.8's versions' fields. Beside the other APIs, as Kafka's
KafkaApis serves these: it speaks the wire, reads the metadata cache and writes ZooKeeper, none of
which the coordinator knows.

A group's coordinator is the leader of its offsets partition, `abs(hash(group)) % partitions`, as
Kafka computes it. While `__consumer_offsets` does not exist, FindCoordinator creates it
(`offsets.topic.num.partitions`, `offsets.topic.replication.factor`) and answers
COORDINATOR_NOT_AVAILABLE, as it does while fewer brokers than that replication factor are alive;
the client asks again.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from actors.broker.events import BrokerEvents
from actors.broker.group.group_coordinator import GroupCoordinator
from actors.broker.group.group_metadata_manager import now_ms
from actors.broker.group.group_records import GROUP_METADATA_TOPIC, OffsetAndMetadata
from actors.broker.metadata_cache import MetadataCache
from actors.broker.network.network import RequestContext
from actors.config import BrokerConfig
from coordination import admin
from coordination.errors import Errors, KrayError, TopicExistsException
from coordination.zkclient import KrayZkClient
from coordination.zkdata import TopicPartition

log = logging.getLogger(__name__)

GROUP_KEY, TRANSACTION_KEY = 0, 1
# kray keeps every record of __consumer_offsets (it does not compact): where Kafka's is compacted, kray's
# deletes nothing by time
OFFSETS_TOPIC_CONFIG = {"retention.ms": "-1", "segment.bytes": "104857600", "compression.type": "producer"}


def _by_topic(items) -> dict[str, list]:
    out: dict[str, list] = {}
    for tp, value in items:
        out.setdefault(tp.topic, []).append((tp.partition, value))
    return out


class GroupApis:
    def __init__(self, broker_id: int, zk: KrayZkClient, cache: MetadataCache, config: BrokerConfig,
                 coordinator: GroupCoordinator, events: BrokerEvents):
        """`events`: the run directory's account of the coordinators FindCoordinator names."""
        self.broker_id, self.zk, self.cache, self.config = broker_id, zk, cache, config
        self.coordinator, self.events = coordinator, events
        self._creating: asyncio.Future | None = None  # this broker's creation of __consumer_offsets
        self.handlers: dict[int, Callable[[RequestContext, object], Awaitable[object]]] = {
            FindCoordinatorRequest.API_KEY: self.find_coordinator, JoinGroupRequest.API_KEY: self.join_group,
            SyncGroupRequest.API_KEY: self.sync_group, HeartbeatRequest.API_KEY: self.heartbeat,
            LeaveGroupRequest.API_KEY: self.leave_group, OffsetCommitRequest.API_KEY: self.offset_commit,
            OffsetFetchRequest.API_KEY: self.offset_fetch, ListGroupsRequest.API_KEY: self.list_groups,
            DescribeGroupsRequest.API_KEY: self.describe_groups, DeleteGroupsRequest.API_KEY: self.delete_groups}

    # -- FindCoordinator -----------------------------------------------------

    async def find_coordinator(self, ctx: RequestContext, request) -> FindCoordinatorResponse:
        def answer(error: Errors, message: str | None = None, node=None) -> FindCoordinatorResponse:
            return FindCoordinatorResponse(throttle_time_ms=0, error_code=int(error), error_message=message,
                                           node_id=node.id if node else -1, host=node.host if node else "",
                                           port=node.port if node else -1)
        if request.key_type == TRANSACTION_KEY:
            return answer(Errors.COORDINATOR_NOT_AVAILABLE, "kray has no transaction coordinator")
        if request.key_type != GROUP_KEY:
            return answer(Errors.INVALID_REQUEST, f"Unknown coordinator key type {request.key_type}")
        snapshot = self.cache.snapshot
        if not self.cache.partition_count(GROUP_METADATA_TOPIC):
            return answer(await self._create_offsets_topic(len(snapshot.alive_brokers)))
        state = snapshot.partitions.get(TopicPartition(GROUP_METADATA_TOPIC, self.coordinator.partition_of(request.key)))
        leader = snapshot.alive_brokers.get(state.leader) if state is not None else None
        node = leader.node(ctx.listener) if leader is not None else None
        if node is None:
            return answer(Errors.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.")
        self.events.coordinator_found(request.key, state.leader, state.leader_epoch)
        return answer(Errors.NONE, "NONE", node)

    async def _create_offsets_topic(self, alive: int) -> Errors:
        """Kafka's createInternalTopic: made once enough brokers are alive; the client asks again meanwhile."""
        rf = self.config.offsets_topic_replication_factor
        if alive < rf:
            log.warning("[KafkaApi-%d] Number of alive brokers '%d' does not meet the required replication factor "
                        "'%d' for the offsets topic (configured via 'offsets.topic.replication.factor'). This error "
                        "can be ignored if the cluster is starting up and not all brokers are up yet.",
                        self.broker_id, alive, rf)
            return Errors.COORDINATOR_NOT_AVAILABLE
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(
                None, lambda: admin.create_topic(self.zk, GROUP_METADATA_TOPIC, self.config.offsets_topic_num_partitions,
                                                 rf, OFFSETS_TOPIC_CONFIG)))
            try:
                await self._creating
                log.info("[KafkaApi-%d] Auto creation of topic %s with %d partitions and replication factor %d is "
                         "successful", self.broker_id, GROUP_METADATA_TOPIC, self.config.offsets_topic_num_partitions, rf)
            except TopicExistsException:
                pass  # made by another broker a moment ago
            except KrayError as e:
                log.warning("[KafkaApi-%d] Could not create %s: %s", self.broker_id, GROUP_METADATA_TOPIC, e)
        return Errors.COORDINATOR_NOT_AVAILABLE

    # -- the group protocol --------------------------------------------------

    async def join_group(self, ctx: RequestContext, request) -> JoinGroupResponse:
        v = ctx.api_version
        result = await self.coordinator.join_group(
            request.group_id, request.member_id, request.group_instance_id if v >= 5 else None, v >= 4,
            ctx.client_id or "", "/" + ctx.peer.rsplit(":", 1)[0],
            request.rebalance_timeout_ms if v >= 1 else request.session_timeout_ms, request.session_timeout_ms,
            request.protocol_type, [(p.name, bytes(p.metadata)) for p in request.protocols])
        R = JoinGroupResponse
        return R(throttle_time_ms=0, error_code=int(result.error), generation_id=result.generation,
                 protocol_type=result.protocol_type,
                 protocol_name=result.protocol if result.protocol is not None or v >= 7 else "",
                 leader=result.leader, member_id=result.member_id,
                 members=[R.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                          for m, i, md in result.members])

    async def sync_group(self, ctx: RequestContext, request) -> SyncGroupResponse:
        v = ctx.api_version
        result = await self.coordinator.sync_group(
            request.group_id, request.generation_id, request.member_id, request.group_instance_id if v >= 3 else None,
            request.protocol_type if v >= 5 else None, request.protocol_name if v >= 5 else None,
            {a.member_id: bytes(a.assignment) for a in request.assignments})
        return SyncGroupResponse(throttle_time_ms=0, error_code=int(result.error), protocol_type=result.protocol_type,
                                 protocol_name=result.protocol, assignment=result.assignment)

    async def heartbeat(self, ctx: RequestContext, request) -> HeartbeatResponse:
        error = self.coordinator.heartbeat(request.group_id, request.member_id,
                                           request.group_instance_id if ctx.api_version >= 3 else None,
                                           request.generation_id)
        return HeartbeatResponse(throttle_time_ms=0, error_code=int(error))

    async def leave_group(self, ctx: RequestContext, request) -> LeaveGroupResponse:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members] if ctx.api_version >= 3 \
            else [(request.member_id, None)]
        error, errors = self.coordinator.leave_group(request.group_id, leaving)
        if ctx.api_version < 3 and error == Errors.NONE and errors:
            error = errors[0]
        R = LeaveGroupResponse
        return R(throttle_time_ms=0, error_code=int(error), members=[
            R.MemberResponse(member_id=m, group_instance_id=i, error_code=int(e))
            for (m, i), e in zip(leaving, errors)])

    # -- offsets -------------------------------------------------------------

    async def offset_commit(self, ctx: RequestContext, request) -> OffsetCommitResponse:
        """Offsets of partitions the cluster does not have are refused (UNKNOWN_TOPIC_OR_PARTITION), the rest
        handed to the coordinator, stamped with this broker's time."""
        timestamp, v = now_ms(), ctx.api_version
        asked = [(TopicPartition(t.name, p.partition_index), p) for t in request.topics for p in t.partitions]
        known = self.cache.partitions
        offsets = {tp: OffsetAndMetadata(offset=p.committed_offset,
                                         leader_epoch=p.committed_leader_epoch if v >= 6 else -1,
                                         metadata=p.committed_metadata or "", commit_timestamp=timestamp)
                   for tp, p in asked if tp in known}
        errors = await self.coordinator.commit_offsets(
            request.group_id, request.member_id, request.group_instance_id if v >= 7 else None,
            request.generation_id_or_member_epoch, offsets) if offsets else {}
        R = OffsetCommitResponse.OffsetCommitResponseTopic
        return OffsetCommitResponse(throttle_time_ms=0, topics=[R(name=topic, partitions=[
            R.OffsetCommitResponsePartition(partition_index=p, error_code=int(e)) for p, e in ps])
            for topic, ps in _by_topic((tp, errors.get(tp, Errors.UNKNOWN_TOPIC_OR_PARTITION)) for tp, _ in asked).items()])

    async def offset_fetch(self, ctx: RequestContext, request) -> OffsetFetchResponse:
        v = ctx.api_version
        asked = None if request.topics is None else \
            [TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes]
        error, offsets = self.coordinator.fetch_offsets(request.group_id, asked)
        R = OffsetFetchResponse.OffsetFetchResponseTopic
        if error != Errors.NONE:
            if v >= 2:
                return OffsetFetchResponse(throttle_time_ms=0, error_code=int(error), topics=[])
            offsets = dict.fromkeys(asked or [])
        return OffsetFetchResponse(throttle_time_ms=0, error_code=0, topics=[R(name=topic, partitions=[
            R.OffsetFetchResponsePartition(partition_index=p, committed_offset=o.offset if o else -1,
                                           committed_leader_epoch=o.leader_epoch if o else -1,
                                           metadata=o.metadata if o else "", error_code=int(error) if v < 2 else 0)
            for p, o in ps]) for topic, ps in _by_topic(sorted(offsets.items())).items()])

    # -- groups listed, described, deleted -----------------------------------

    async def list_groups(self, ctx: RequestContext, request) -> ListGroupsResponse:
        error, groups = self.coordinator.list_groups()
        states = set(request.states_filter or []) if ctx.api_version >= 4 else set()
        R = ListGroupsResponse
        return R(throttle_time_ms=0, error_code=int(error), groups=[
            R.ListedGroup(group_id=g, protocol_type=t, group_state=s) for g, t, s in groups if not states or s in states])

    async def describe_groups(self, ctx: RequestContext, request) -> DescribeGroupsResponse:
        R = DescribeGroupsResponse.DescribedGroup
        described = []
        for group_id in request.groups:
            error, summary = self.coordinator.describe_group(group_id)
            described.append(R(error_code=int(error), group_id=group_id, group_state=summary.state,
                               protocol_type=summary.protocol_type, protocol_data=summary.protocol, members=[
                R.DescribedGroupMember(member_id=m, group_instance_id=i, client_id=c, client_host=h,
                                       member_metadata=md, member_assignment=a)
                for m, i, c, h, md, a in summary.members]))
        return DescribeGroupsResponse(throttle_time_ms=0, groups=described)

    async def delete_groups(self, ctx: RequestContext, request) -> DeleteGroupsResponse:
        results = await self.coordinator.delete_groups(list(request.groups_names))
        return DeleteGroupsResponse(throttle_time_ms=0, results=[
            DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=int(e)) for g, e in results.items()])
