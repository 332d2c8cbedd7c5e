"""The APIs a kray broker serves, with their versions.

Versions are Kafka 2.8's (what its ApiVersionsResponse lists), with Fetch capped at v12 so that no
client fetches by topic id. Minimum versions start where v2 record batches and kafka-python's
message definitions do (Produce 3, Fetch 4, OffsetForLeaderEpoch 2, OffsetCommit 2,
OffsetFetch 1, CreateTopics 2, DeleteTopics 1, DescribeConfigs 1, DescribeLogDirs 1): older versions
carry the message formats v0/v1 that kray does not store, or fields Kafka 3/4 dropped with them
(KIP-896).
"""
from __future__ import annotations

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeLogDirsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from coordination.errors import Errors

# api key -> (request class, min version, max version)
API_VERSIONS = {cls.API_KEY: (cls, low, high) for cls, low, high in [
    (ProduceRequest, 3, 9), (FetchRequest, 4, 12), (ListOffsetsRequest, 0, 6), (MetadataRequest, 0, 11),
    (OffsetCommitRequest, 2, 8), (OffsetFetchRequest, 1, 7), (FindCoordinatorRequest, 0, 3),
    (JoinGroupRequest, 0, 7), (HeartbeatRequest, 0, 4), (LeaveGroupRequest, 0, 4), (SyncGroupRequest, 0, 5),
    (DescribeGroupsRequest, 0, 5), (ListGroupsRequest, 0, 4), (ApiVersionsRequest, 0, 3),
    (InitProducerIdRequest, 0, 4), (OffsetForLeaderEpochRequest, 2, 4),
    (CreateTopicsRequest, 2, 7), (DeleteTopicsRequest, 1, 6), (CreatePartitionsRequest, 0, 3),
    (DescribeConfigsRequest, 1, 4), (AlterConfigsRequest, 0, 2), (IncrementalAlterConfigsRequest, 0, 1),
    (AlterPartitionReassignmentsRequest, 0, 0), (ListPartitionReassignmentsRequest, 0, 0),
    (ElectLeadersRequest, 0, 2), (DeleteGroupsRequest, 0, 2), (DescribeLogDirsRequest, 1, 2),
    (DescribeClusterRequest, 0, 0)]}


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
