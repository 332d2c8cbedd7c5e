"""Requests and responses keep their types through Ray's pickling, and rows from outside are validated."""
import pickle

import pytest
from pydantic import ValidationError
from ray import cloudpickle

from actors.protocol import (
    ControllerResponse,
    LeaderAndIsrRequest,
    PartitionError,
    PartitionErrors,
    PartitionState,
    PartitionStates,
    StopReplicaPartition,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from coordination.errors import Errors

STATES = PartitionStates(PartitionState("t", p, 3, 1, 7, (1, 2), 4, (1, 2, 3), offline_replicas=(3,))
                         for p in range(1000))


def ray_round_trip(obj):
    return pickle.loads(cloudpickle.dumps(obj, protocol=5))


def test_requests_round_trip_with_their_row_types():
    request = LeaderAndIsrRequest(controller_id=1, controller_epoch=3, broker_epoch=9, partition_states=STATES,
                                  live_leaders=[])
    back = ray_round_trip(request)
    assert back == request
    assert type(back.partition_states) is PartitionStates
    assert all(type(s) is PartitionState for s in back.partition_states)
    assert back.partition_states[5].offline_replicas == (3,)
    stop = StopReplicaRequest(controller_id=1, controller_epoch=3, broker_epoch=9,
                              partitions=[StopReplicaPartition("t", 0, -2, True)])
    assert ray_round_trip(stop).partitions == (StopReplicaPartition("t", 0, -2, True),)


def test_rows_shared_by_several_requests_are_encoded_once():
    requests = [UpdateMetadataRequest(controller_id=1, controller_epoch=3, broker_epoch=b, partition_states=STATES,
                                      live_brokers=[]) for b in (1, 2, 3)]
    assert all(r.partition_states is STATES for r in requests)  # trusted rows are kept as they are
    blobs = [r.partition_states.__reduce__()[1][1] for r in requests]
    assert all(b is blobs[0] for b in blobs)
    assert [ray_round_trip(r).broker_epoch for r in requests] == [1, 2, 3]


def test_rows_passed_on_are_not_encoded_again():
    """A RequestSender unpickles the controller's requests and pickles them again for the broker."""
    request = LeaderAndIsrRequest(controller_id=1, controller_epoch=3, broker_epoch=9, partition_states=STATES,
                                  live_leaders=[])
    blob = STATES.__reduce__()[1][1]
    forwarded = ray_round_trip(request)
    assert forwarded.partition_states.__dict__.get("blob") == blob  # kept from the unpickling, before any pickling
    assert forwarded.partition_states.__reduce__()[1][1] is forwarded.partition_states.__dict__["blob"]
    assert ray_round_trip(forwarded) == request


def test_response_errors_are_plain_codes_that_compare_with_errors():
    response = ControllerResponse(api="LeaderAndIsr", broker_id=2, partition_errors=PartitionErrors(
        [PartitionError("t", 0, int(Errors.NONE)), PartitionError("t", 1, int(Errors.STALE_CONTROLLER_EPOCH))]))
    back = ray_round_trip(response)
    assert [e.error_code for e in back.partition_errors] == [Errors.NONE, Errors.STALE_CONTROLLER_EPOCH]
    assert back.partition_errors[1].error_code == 11
    assert ControllerResponse(api="StopReplica", broker_id=2).partition_errors == ()


def test_rows_from_outside_are_validated_field_by_field():
    request = LeaderAndIsrRequest(controller_id=1, controller_epoch=1, broker_epoch=1, live_leaders=[],
                                  partition_states=[("t", 0, 1, 2, 0, [2], 0, [2, 3])])
    assert request.partition_states == (PartitionState("t", 0, 1, 2, 0, (2,), 0, (2, 3)),)
    with pytest.raises(ValidationError):
        LeaderAndIsrRequest(controller_id=1, controller_epoch=1, broker_epoch=1, live_leaders=[],
                            partition_states=[("t", "zero", 1, 2, 0, [2], 0, [2, 3])])
    with pytest.raises(ValidationError):
        StopReplicaRequest(controller_id=1, controller_epoch=1, broker_epoch=1, partitions=[{"topic": "t"}])
