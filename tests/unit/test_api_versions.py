"""The APIs and versions a broker serves, and the group APIs' clean answers (no group coordinator)."""
from __future__ import annotations

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from actors.broker.api_versions import API_VERSIONS, GROUP_APIS, group_error_response, is_group_api, supported
from coordination.errors import Errors

C = OffsetCommitRequest.OffsetCommitRequestTopic
F = OffsetFetchRequest.OffsetFetchRequestTopic
REQUESTS = [
    FindCoordinatorRequest(key="g", key_type=0),
    JoinGroupRequest(group_id="g", session_timeout_ms=10_000, member_id="", protocol_type="consumer", protocols=[]),
    SyncGroupRequest(group_id="g", generation_id=1, member_id="m", assignments=[]),
    HeartbeatRequest(group_id="g", generation_id=1, member_id="m"),
    LeaveGroupRequest(group_id="g", member_id="m"),
    OffsetCommitRequest(group_id="g", topics=[C(name="t", partitions=[C.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=5)])]),
    OffsetFetchRequest(group_id="g", topics=[F(name="t", partition_indexes=[0, 1])]),
    DescribeGroupsRequest(groups=["g", "h"]),
    ListGroupsRequest(),
]


def test_kafka_28_versions_from_where_v2_batches_start():
    assert API_VERSIONS[0][1:] == (3, 9) and API_VERSIONS[1][1:] == (4, 12)  # Produce; Fetch capped at 12
    assert API_VERSIONS[18][1:] == (0, 3) and API_VERSIONS[3][1:] == (0, 11)  # ApiVersions; Metadata
    assert supported(1, 12) and not supported(1, 13) and not supported(0, 2) and not supported(57, 0)


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_every_group_api_is_answered_with_coordinator_not_available_at_every_version(request_):
    assert is_group_api(request_.API_KEY) and len(GROUP_APIS) == len(REQUESTS)
    _, low, high = API_VERSIONS[request_.API_KEY]
    for version in range(low, high + 1):
        response = group_error_response(request_, version)
        response.encode(version=version)  # a well-formed answer at the version asked
        d = response.to_dict()
        codes = [v for k, v in _walk(d) if k == "error_code"]
        assert codes and set(codes) == {Errors.COORDINATOR_NOT_AVAILABLE}, (type(request_).__name__, d)


def _walk(value, key=None):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v, key)
    else:
        yield key, value
