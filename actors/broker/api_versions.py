"""The APIs a kray broker serves, with their versions, and the clean errors of the group APIs.

Versions are Kafka 2.8's (what its ApiVersionsResponse lists), with Fetch capped at v12 so that no
client fetches by topic id. Minimum versions start where v2 record batches and kafka-python's
message definitions do (Produce 3, Fetch 4, ListOffsets 1, OffsetForLeaderEpoch 2, OffsetCommit 2,
OffsetFetch 1, CreateTopics 2, DeleteTopics 1, DescribeConfigs 1, DescribeLogDirs 1): older versions
carry the message formats v0/v1 that kray does not store, or fields Kafka 3/4 dropped with them
(KIP-896).

kray has no group coordinator: consumers assign() partitions. The group APIs are still listed, so
that a client using a group gets an answer it reports (COORDINATOR_NOT_AVAILABLE) rather than a
connection closed on an unknown API key.
"""
from __future__ import annotations

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListGroupsResponse,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
)
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from coordination.errors import Errors

# api key -> (request class, min version, max version)
API_VERSIONS = {cls.API_KEY: (cls, low, high) for cls, low, high in [
    (ProduceRequest, 3, 9), (FetchRequest, 4, 12), (ListOffsetsRequest, 1, 6), (MetadataRequest, 0, 11),
    (OffsetCommitRequest, 2, 8), (OffsetFetchRequest, 1, 7), (FindCoordinatorRequest, 0, 3),
    (JoinGroupRequest, 0, 7), (HeartbeatRequest, 0, 4), (LeaveGroupRequest, 0, 4), (SyncGroupRequest, 0, 5),
    (DescribeGroupsRequest, 0, 5), (ListGroupsRequest, 0, 4), (ApiVersionsRequest, 0, 3),
    (InitProducerIdRequest, 0, 4), (OffsetForLeaderEpochRequest, 2, 4),
    (CreateTopicsRequest, 2, 7), (DeleteTopicsRequest, 1, 6), (CreatePartitionsRequest, 0, 3),
    (DescribeConfigsRequest, 1, 4), (AlterConfigsRequest, 0, 2), (IncrementalAlterConfigsRequest, 0, 1),
    (AlterPartitionReassignmentsRequest, 0, 0), (ListPartitionReassignmentsRequest, 0, 0),
    (ElectLeadersRequest, 0, 2), (DescribeLogDirsRequest, 1, 2), (DescribeClusterRequest, 0, 0)]}

GROUP_APIS = {cls.API_KEY for cls in (OffsetCommitRequest, OffsetFetchRequest, FindCoordinatorRequest,
                                      JoinGroupRequest, HeartbeatRequest, LeaveGroupRequest, SyncGroupRequest,
                                      DescribeGroupsRequest, ListGroupsRequest)}
NO_COORDINATOR = int(Errors.COORDINATOR_NOT_AVAILABLE)
NO_COORDINATOR_MESSAGE = "kray has no group coordinator: assign() partitions instead of joining a group"


def supported(api_key: int, version: int) -> bool:
    entry = API_VERSIONS.get(api_key)
    return entry is not None and entry[1] <= version <= entry[2]


def api_versions_response(error: Errors = Errors.NONE) -> ApiVersionsResponse:
    """Every API with its versions; with UNSUPPORTED_VERSION (KIP-511's answer to a client asking in a
    version this broker does not know) only ApiVersions' own, as Kafka 2.8's getErrorResponse."""
    listed = sorted(API_VERSIONS.items()) if error == Errors.NONE else \
        [(ApiVersionsRequest.API_KEY, API_VERSIONS[ApiVersionsRequest.API_KEY])]
    return ApiVersionsResponse(error_code=int(error), throttle_time_ms=0, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, (_, low, high) in listed])


def is_group_api(api_key: int) -> bool:
    return api_key in GROUP_APIS


def group_error_response(request, version: int):
    """COORDINATOR_NOT_AVAILABLE in every error field of the group API's response, echoing what the
    request named where the response answers per item."""
    key = request.API_KEY
    if key == FindCoordinatorRequest.API_KEY:
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=NO_COORDINATOR,
                                       error_message=NO_COORDINATOR_MESSAGE, node_id=-1, host="", port=-1)
    if key == OffsetCommitRequest.API_KEY:
        R = OffsetCommitResponse.OffsetCommitResponseTopic
        return OffsetCommitResponse(throttle_time_ms=0, topics=[R(name=t.name, partitions=[
            R.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=NO_COORDINATOR)
            for p in t.partitions]) for t in request.topics])
    if key == OffsetFetchRequest.API_KEY:
        R = OffsetFetchResponse.OffsetFetchResponseTopic
        return OffsetFetchResponse(throttle_time_ms=0, error_code=NO_COORDINATOR, topics=[R(name=t.name, partitions=[
            R.OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, metadata="",
                                           error_code=NO_COORDINATOR) for p in t.partition_indexes])
            for t in request.topics or []])
    if key == DescribeGroupsRequest.API_KEY:
        R = DescribeGroupsResponse.DescribedGroup
        return DescribeGroupsResponse(throttle_time_ms=0, groups=[
            R(error_code=NO_COORDINATOR, group_id=g, group_state="", protocol_type="", protocol_data="", members=[])
            for g in request.groups])
    simple = {JoinGroupRequest.API_KEY: JoinGroupResponse, HeartbeatRequest.API_KEY: HeartbeatResponse,
              LeaveGroupRequest.API_KEY: LeaveGroupResponse, SyncGroupRequest.API_KEY: SyncGroupResponse,
              ListGroupsRequest.API_KEY: ListGroupsResponse}
    return simple[key](throttle_time_ms=0, error_code=NO_COORDINATOR)
